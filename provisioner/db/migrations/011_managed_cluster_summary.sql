-- A tenant's managed clusters as its status lists them (name, server, conditions; null when it has
-- none), read with every tenant read (store/tenants.ts, TENANT_COLUMNS). A function keeps the hot
-- read's statement short: its text stays within pg_stat_activity's 1024 bytes, so the statement
-- can still be recognised there.
CREATE FUNCTION managed_cluster_summary(tenant uuid) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_agg(json_build_object('name', m.name, 'server', m.server, 'conditions', m.conditions) ORDER BY m.name)
    FROM managed_clusters m WHERE m.tenant_id = tenant
$$;

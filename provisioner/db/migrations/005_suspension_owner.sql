-- Who suspended a tenant decides who may resume it: a tenant resumes only its own suspension; an
-- operator's (for example for non-payment or abuse, with a reason) needs an operator.
ALTER TABLE tenants ADD COLUMN suspended_by text CHECK (suspended_by IN ('operator', 'tenant'));
ALTER TABLE tenants ADD COLUMN suspension_reason text;
-- Tenants suspended before this migration: the role of the last suspension in the audit log
-- (tenant stays tenant; operator or admin is an operator's; unknown counts as an operator's).
UPDATE tenants t SET suspended_by = coalesce((
  SELECT CASE WHEN a.actor_role = 'tenant' THEN 'tenant' ELSE 'operator' END
    FROM audit_log a
   WHERE a.target_type = 'tenant' AND a.target_id = t.id::text AND a.action = 'tenant.suspend'
   ORDER BY a.id DESC LIMIT 1), 'operator')
 WHERE t.suspended;

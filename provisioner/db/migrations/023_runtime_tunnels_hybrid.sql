-- Which replica holds a hybrid runtime's tunnel, and since when (issue 37): written by that
-- replica when the tunnel connects and cleared when it closes (only if still that connection), so
-- that every replica shows the runtime's tunnel state. Hosted runtimes' tunnels stay in
-- runtime_tunnels, keyed by tenant.
ALTER TABLE runtimes
  ADD COLUMN tunnel_replica text,
  ADD COLUMN tunnel_connected_at timestamptz;

-- Ingest writes every object of a runtime again and again (each state change of each Application,
-- Rollout, Workflow): each index on runtime_objects is one more write per stored state, and the
-- ingest benchmark (docs/benchmarks.md) spent most of its time there. The listings read one
-- tenant's objects of one kind in (namespace, name) order, which the primary key serves; the
-- filters (health, sync, phase) are checked on those rows, a few thousand per tenant at most,
-- instead of having an index each. What stays: the primary key and the change stream's index.
DROP INDEX runtime_objects_live;
DROP INDEX runtime_objects_health;
DROP INDEX runtime_objects_sync;
DROP INDEX runtime_objects_phase;

-- check view: table_columns
-- table: the one named by $table_name
-- grain: one row per column of that table, from the catalog (no rows if the table is missing)
-- invariants: SCHEMA (exact column names and types)
-- parameters: $table_name (varchar, schema.table); the catalog costs the same whatever the
--   number of runs
select
    schema_name || '.' || table_name as table_name,
    column_index,
    column_name,
    data_type,
    column_name || ' ' || data_type as column_decl
from duckdb_columns()
where database_name = current_database()
    and schema_name || '.' || table_name = $table_name
order by column_index

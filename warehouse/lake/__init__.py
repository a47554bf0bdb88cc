"""Lake mode: the warehouse as Apache Iceberg tables that many writers feed and any engine reads.

The DuckDB file stays the embedded default. In lake mode the raw tables, the staging models and
the marts are Iceberg tables in a SQL catalog (SQLite file or PostgreSQL) given by URI, with
their files under a warehouse location (a folder here; an object store through pyiceberg's
FileIO in production). Modules:

* ``catalog``  — catalog URI and location resolution, opening the catalog, consistent reads;
* ``schemas``  — Arrow/Iceberg schemas of the raw tables, type normalisation for model outputs;
* ``commit``   — one run = one atomic, exactly-once commit across every raw table it touches;
* ``ingest``   — ``pwh lake ingest``: parse files with the same formats as ``pwh ingest``;
* ``sync``     — ``pwh lake sync``: publish an existing DuckDB warehouse (incremental);
* ``duck``     — the SQL models on DuckDB over the lake (``pwh lake build --engine duckdb``);
* ``spark``    — the same models on Spark (transpiled with sqlglot, per-model overrides);
* ``dialect``  — transpiling and the lint refusing constructs that change meaning silently.

Needs the ``[lake]`` extra (pyiceberg, pyspark, psycopg); nothing here is imported by the
DuckDB-only code paths.
"""

"""An interactive SQL shell on the published snapshot of the warehouse (read-only, locked down).

End each statement with ';'; each statement of a line runs on its own (an error in one is
reported with its number and the others still run). Ctrl-C interrupts the running query (or
clears the input); Ctrl-D or .quit leaves (Ctrl-D at the "...>" prompt discards the unfinished
statement, never runs it). Queries are interrupted after --timeout seconds. Dot commands:

  .tables [SCHEMA]    list tables and views
  .schema TABLE       columns of a table (schema.table)
  .format FMT         table, csv or json output
  .timeout SECONDS    query timeout for this session (0 = none)
  .snapshot           which snapshot this session reads
  .exports            the export folder (relative paths in COPY ... TO, read_csv … land there)
  .help               this text
  .quit               leave

Standard input that is not a terminal is run as a script (statements separated by ';'),
stopping at the first error with exit code 1."""

from __future__ import annotations

import sys

COMMAND = (55, "shell", "interactive read-only SQL shell on the published snapshot")


def add_arguments(p):
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    from warehouse.serving.query import add_cli_options

    add_cli_options(p)


def run(args, settings) -> int:
    from warehouse.serving.query import cli_connect

    con = cli_connect(args, settings)
    try:
        return Shell(con, args.format, interactive=sys.stdin.isatty()).loop()
    finally:
        con.close()


class Shell:
    def __init__(self, con, fmt: str, *, interactive: bool):
        self.con = con
        self.fmt = fmt
        self.interactive = interactive

    def out(self, text: str) -> None:
        print(text, flush=True)

    def err(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def loop(self) -> int:
        if self.interactive:
            try:
                import readline  # noqa: F401 - line editing and in-session history
            except ImportError:
                pass
            self.out(f"pwh shell: snapshot {self.con.version} ({self.con.path}); read-only. "
                     "End statements with ';'. Ctrl-C stops a query, Ctrl-D leaves, .help "
                     f"for help. Files (COPY ... TO 'x.csv'): {self.con.export_dir}/")
        from warehouse.serving.results import ends_statement, split_statements

        buf: list[str] = []
        while True:
            try:
                line = input(("   ...> " if buf else "pwh> ") if self.interactive else "")
            except EOFError:
                if buf and "".join(buf).strip():
                    if self.interactive:  # Ctrl-D at "...>": never run half a statement
                        self.err("\nunfinished statement discarded (not run: no ';' ended "
                                 "it); Ctrl-D again or .quit leaves")
                        buf = []
                        continue
                    ok = self.execute("\n".join(buf))  # a script's last statement
                    if not ok:
                        return 1
                if self.interactive:
                    self.out("")
                return 0
            except KeyboardInterrupt:
                self.out("^C")
                buf = []
                continue
            if not buf and line.strip().startswith("."):
                if self.dot(line.strip()) == "quit":
                    return 0
                continue
            buf.append(line)
            text = "\n".join(buf)
            if ";" not in line:
                continue
            statements = split_statements(text)
            # run what is complete; an unfinished last statement waits for its ';'
            done, buf = ((statements, []) if ends_statement(text)
                         else (statements[:-1], statements[-1:]))
            if done and not self.execute(done) and not self.interactive:
                return 1

    def execute(self, text: str | list[str]) -> bool:
        """Run every statement of ``text`` (or of the list of statements), each on its own,
        printing each result as it comes: a syntax or query error in one is reported with its
        number and does not stop the others (in a script it stops there: exit 1). False if any
        failed or Ctrl-C stopped them."""
        from warehouse.errors import PwhError
        from warehouse.serving.query import QueryInterrupted, hard_deadline
        from warehouse.serving.results import format_result, run_query, split_statements

        statements = split_statements(text) if isinstance(text, str) else text
        ok = True
        for i, statement in enumerate(statements, 1):
            try:
                with hard_deadline(self.con.timeout):
                    cols, rows = run_query(self.con, statement)
            except (KeyboardInterrupt, QueryInterrupted):
                self.con.interrupt()
                self.err("interrupted (Ctrl-C): the query was stopped; Ctrl-D or .quit leaves")
                return False
            except PwhError as exc:
                where = f"statement {i} of {len(statements)} ({_short(statement)})" \
                    if len(statements) > 1 else ""
                self.err(f"error{' in ' + where if where else ''}: {exc}")
                ok = False
                if not self.interactive:
                    return False
                continue
            if cols:
                self.out(format_result(cols, rows, self.fmt))
        return ok

    def dot(self, line: str) -> str | None:
        cmd, _, arg = line.partition(" ")
        arg = arg.strip()
        if cmd in (".quit", ".exit", ".q"):
            return "quit"
        if cmd == ".help":
            self.out(__doc__.split("Dot commands:")[1].strip("\n"))
        elif cmd == ".tables":
            self.execute_params(
                "SELECT table_schema AS schema, table_name AS name, lower(table_type) AS type "
                "FROM information_schema.tables WHERE table_schema NOT IN "
                "('information_schema', 'pg_catalog') AND (? = '' OR table_schema = ?) "
                "ORDER BY 1, 2", [arg, arg])
        elif cmd == ".schema":
            schema, _, table = arg.rpartition(".")
            if not table:
                self.err("usage: .schema SCHEMA.TABLE")
            else:
                self.execute_params(
                    "SELECT column_name AS column, data_type AS type, is_nullable AS nullable "
                    "FROM information_schema.columns WHERE table_name = ? "
                    "AND (? = '' OR table_schema = ?) ORDER BY ordinal_position",
                    [table, schema, schema])
        elif cmd == ".format":
            if arg in ("table", "csv", "json"):
                self.fmt = arg
            else:
                self.err("usage: .format table|csv|json")
        elif cmd == ".timeout":
            try:
                self.con.timeout = float(arg)
            except ValueError:
                self.err("usage: .timeout SECONDS (0 = none)")
        elif cmd == ".snapshot":
            self.out(f"{self.con.version}  {self.con.path}")
        elif cmd == ".exports":
            self.out(str(self.con.export_dir))
        else:
            self.err(f"unknown command {cmd}; .help lists them")
        return None

    def execute_params(self, sql: str, params: list) -> None:
        from warehouse.errors import PwhError
        from warehouse.serving.results import format_result, run_query

        try:
            cols, rows = run_query(self.con, sql, params)
        except PwhError as exc:
            self.err(f"error: {exc}")
            return
        self.out(format_result(cols, rows, self.fmt))


def _short(statement: str, limit: int = 40) -> str:
    s = " ".join(statement.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"

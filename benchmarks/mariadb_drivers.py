"""Which driver for MariaDB, by measurement (ADR 0012): the queue's claim/complete loop
written by hand on each driver, in one run, rounds interleaved; then the facts the
backend's design rests on (the plans over 100,000 finished rows, dedupe without losing
the existing id, the server clock, the migration lock).

    python -m benchmarks.mariadb_drivers [--dsn mysql://root@127.0.0.1:3306] [--jobs 2000]

Each driver claims one job per transaction (ADR 0012's two steps: the candidates by a
plain read, one locked by id with `FOR UPDATE SKIP LOCKED`, then `UPDATE` by id,
COMMIT) and completes it fenced by its token (`UPDATE`, COMMIT), all times from the
server's clock (R20), until the queue is empty. Reported: jobs/s (wall) and the client's
CPU per job, which is the driver's own cost with the server's commit waits taken out.
queuecore's own loop (`claim` one, `complete` it) runs beside them on mysqlclient, the
driver it uses, with the hand loop on that driver as its floor: the same rules (R05 to
R09, the claim in two steps, the server's clock), the same table (the migration's).
Everything runs in a scratch database `qc_probe_<pid>`, dropped at the end.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from benchmarks import mariadb_facts, mariadb_plans
from benchmarks.mariadb_plans import NOW, TABLE

#: module name -> (its name in SQLAlchemy URLs, how it connects)
DRIVERS = {
    "MySQLdb": "mysqldb",  # mysqlclient, C (libmariadb)
    "mariadb": "mariadbconnector",  # MariaDB Connector/Python, C (libmariadb)
    "pymysql": "pymysql",  # pure Python
}

READY = f"live_priority IS NOT NULL AND visible_at <= {NOW} AND attempts < max_attempts"
#: ADR 0012's claim, in two steps: the candidates by a plain read, then locked by id.
CANDIDATES = f"SELECT id FROM {TABLE} WHERE {READY} ORDER BY live_priority, visible_at, id LIMIT 2"
LOCK = f"SELECT id FROM {TABLE} WHERE id IN (%s, %s) AND {READY} LIMIT 1 FOR UPDATE SKIP LOCKED"
TAKE = (
    f"UPDATE {TABLE} SET state = 'running', attempts = attempts + 1, "
    f"visible_at = {NOW} + 30, lease_token = %s, worker = 'bench' WHERE id = %s"
)
COMPLETE = (
    f"UPDATE {TABLE} SET state = 'done', finished_at = {NOW}, lease_token = NULL "
    "WHERE id = %s AND lease_token = %s AND state = 'running'"
)
ENQUEUE = (
    f"INSERT INTO {TABLE} (kind, queue, payload, priority, state, attempts, max_attempts, "
    f"visible_at, created_at) VALUES ('noop', 'default', %s, 0, 'queued', 0, 3, {NOW}, {NOW})"
)


def connect(module: str, server: Any, database: str | None) -> Any:
    """A DB-API connection in autocommit off, READ COMMITTED (each statement of a claim
    reads the latest commits), UTC session time zone (`UNIX_TIMESTAMP` reads `NOW()`
    in the session's zone)."""
    driver = importlib.import_module(module)
    options: dict[str, Any] = {"host": server.hostname, "port": server.port or 3306}
    options["user"] = server.username or "root"
    options["password"] = server.password or ""
    if database:
        options["database"] = database
    conn = driver.connect(**options)
    conn.autocommit(False) if module != "mariadb" else setattr(conn, "autocommit", False)
    cursor = conn.cursor()
    cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    cursor.execute("SET time_zone = '+00:00'")
    conn.commit()
    return conn


def sql_for(module: str, sql: str) -> str:
    """MariaDB Connector/Python's paramstyle is qmark; the other two take %s."""
    return sql.replace("%s", "?") if module == "mariadb" else sql


def loop(module: str, conn: Any, jobs: int) -> tuple[float, float]:
    """Enqueue `jobs`, then claim and complete them one by one; (wall s, CPU s)."""
    cursor = conn.cursor()
    cursor.execute(f"DELETE FROM {TABLE}")
    cursor.executemany(sql_for(module, ENQUEUE), [("{}",)] * jobs)
    conn.commit()
    lock, take, complete = (sql_for(module, s) for s in (LOCK, TAKE, COMPLETE))
    wall, cpu = time.perf_counter(), time.process_time()
    done = 0
    while True:
        cursor.execute(CANDIDATES)
        candidates = [found[0] for found in cursor.fetchall()]
        if not candidates:
            conn.commit()
            break
        cursor.execute(lock, (candidates + candidates)[:2])
        row = cursor.fetchone()
        token = secrets.token_hex(16)
        cursor.execute(take, (token, row[0]))
        conn.commit()
        cursor.execute(complete, (row[0], token))
        if cursor.rowcount != 1:
            raise AssertionError(f"{module}: the fenced complete of job {row[0]} missed")
        conn.commit()
        done += 1
    if done != jobs:
        raise AssertionError(f"{module}: {done} of {jobs} jobs done")
    return time.perf_counter() - wall, time.process_time() - cpu


def sqlalchemy_url(module: str, server: Any, database: str) -> Any:
    """The DSN a user would give queuecore for this driver."""
    import sqlalchemy as sa

    return sa.URL.create(
        f"mariadb+{DRIVERS[module]}",
        username=server.username or "root",
        password=server.password,
        host=server.hostname,
        port=server.port or 3306,
        database=database,
    )


def sqlalchemy_check(module: str, server: Any, database: str) -> str:
    """Does SQLAlchemy's MariaDB dialect run on this driver: a connection, the claim's
    `FOR UPDATE SKIP LOCKED` compiled by SQLAlchemy, and what it says the server can do."""
    import sqlalchemy as sa

    url = sqlalchemy_url(module, server, database)
    engine = sa.create_engine(url)
    table = sa.Table(TABLE, sa.MetaData(), autoload_with=engine)
    pick = (
        sa.select(table.c.id)
        .where(table.c.live_priority.is_not(None))
        .order_by(table.c.live_priority, table.c.visible_at, table.c.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    with engine.begin() as conn:
        conn.execute(pick).all()
        sql = str(pick.compile(conn))
    engine.dispose()
    dialect = engine.dialect
    return (
        f"ok ({'SKIP LOCKED' if 'SKIP LOCKED' in sql else 'no SKIP LOCKED'}; "
        f"update_returning={dialect.update_returning}, "
        f"insert_returning={dialect.insert_returning})"
    )


@contextmanager
def scratch(server: Any) -> Iterator[str]:
    """A database of our own, dropped afterwards whatever happens."""
    name = f"qc_probe_{os.getpid()}"
    admin = connect(_first_driver(), server, None)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def _first_driver() -> str:
    for module in DRIVERS:
        if _installed(module):
            return module
    raise SystemExit("no MariaDB driver installed: pip install mysqlclient mariadb pymysql")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def queuecore_loop(queue: Any, jobs: int) -> tuple[float, float]:
    """The same loop through queuecore's own API on the same table: `enqueue_many`, then
    `claim` one and `complete` it until none is left; (wall s, CPU s)."""
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {TABLE}")
    queue.enqueue_many("noop", [{}] * jobs)
    wall, cpu = time.perf_counter(), time.process_time()
    done = 0
    while claimed := queue.claim("bench"):
        if not queue.complete(claimed[0]):
            raise AssertionError(f"queuecore: the fenced complete of job {claimed[0].id} missed")
        done += 1
    if done != jobs:
        raise AssertionError(f"queuecore: {done} of {jobs} jobs done")
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(server: Any, database: str, jobs: int, rounds: int) -> None:
    """Each driver's hand loop, and queuecore's on mysqlclient, interleaved, on the table
    the migration builds (queuecore's row is measured against mysqlclient's, its floor)."""
    import queuecore

    modules = [m for m in DRIVERS if _installed(m)]
    url = sqlalchemy_url(modules[0], server, database)
    queuecore.migrate(url)
    queue = queuecore.connect(url)
    conns = {m: connect(m, server, database) for m in modules}
    loops: dict[str, Callable[[], tuple[float, float]]] = {
        m: (lambda m=m: loop(m, conns[m], jobs)) for m in modules
    }
    loops["queuecore"] = lambda: queuecore_loop(queue, jobs)
    walls: dict[str, list[float]] = {name: [] for name in loops}
    cpus: dict[str, list[float]] = {name: [] for name in loops}
    loop(modules[0], conns[modules[0]], 50)  # warm the table and the buffer pool
    for _ in range(rounds):
        for name, run in loops.items():  # interleaved: a disturbance hits each alike
            wall, cpu = run()
            walls[name].append(wall)
            cpus[name].append(cpu)
    best = max(jobs / statistics.median(walls[m]) for m in modules)
    floor = jobs / statistics.median(walls[modules[0]])
    print(f"claim/complete loop, {jobs} jobs x {rounds} rounds (medians), one connection:")
    print(f"{'driver':<10} {'jobs/s':>8} {'vs best':>8} {'client CPU/job':>15}  SQLAlchemy")
    for name in loops:
        rate = jobs / statistics.median(walls[name])
        cpu_us = statistics.median(cpus[name]) / jobs * 1e6
        if name == "queuecore":
            check = f"{rate / floor:.2f}x the {modules[0]} floor (its driver)"
        else:
            check = _safely(lambda m=name: sqlalchemy_check(m, server, database))
        print(f"{name:<10} {rate:>8,.0f} {rate / best:>8.2f} {cpu_us:>12,.0f} µs  {check}")
    for conn in conns.values():
        conn.close()
    queue.close()


def loop_and_floor(server: Any, jobs: int, rounds: int) -> dict[str, list[float]]:
    """queuecore's one-connection loop and its floor (the hand loop on the same driver:
    mysqlclient where installed, else the next of DRIVERS), rounds interleaved, in a
    scratch database: jobs/s of each round, as "queuecore" and "floor"."""
    import queuecore

    module = _first_driver()
    rates: dict[str, list[float]] = {"queuecore": [], "floor": []}
    with scratch(server) as database:
        url = sqlalchemy_url(module, server, database)
        queuecore.migrate(url)
        queue = queuecore.connect(url)
        conn = connect(module, server, database)
        try:
            loop(module, conn, 50)  # warm the table and the buffer pool
            for _ in range(rounds):
                rates["floor"].append(jobs / loop(module, conn, jobs)[0])
                rates["queuecore"].append(jobs / queuecore_loop(queue, jobs)[0])
        finally:
            conn.close()
            queue.close()
    return rates


def _safely(probe: Callable[[], str]) -> str:
    try:
        return probe()
    except Exception as exc:  # a driver SQLAlchemy cannot use is a finding, not a crash
        return f"FAILED: {type(exc).__name__}: {exc}"


def facts(server: Any, database: str) -> None:
    """The probes of `mariadb_facts`, on connections SQLAlchemy's dialect makes."""
    import sqlalchemy as sa

    module = _first_driver()
    url = sqlalchemy_url(module, server, database)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    print(f"\nfacts (through SQLAlchemy's mariadb+{DRIVERS[module]}):")
    probes = (mariadb_facts.dedupe, mariadb_facts.skip_locked, mariadb_facts.clock)
    for probe in (*probes, mariadb_facts.migration_lock, mariadb_facts.keys):
        for line in probe(engine.raw_connection):
            print(f"- {line}")
    engine.dispose()


def plans(server: Any, database: str) -> None:
    conn = connect(_first_driver(), server, database)
    for storage in ("VIRTUAL", "PERSISTENT"):
        print(
            f"\nplans over {mariadb_plans.FINISHED:,} finished rows and "
            f"{mariadb_plans.LIVE} live ones, live_priority {storage}:"
        )
        print(f"{'statement':<32} {'key':<34} {'type':<6} {'rows read':>9}  filesort")
        for p in mariadb_plans.prove(conn.cursor(), storage):
            print(
                f"{p['statement']:<32} {p['key'] or '-':<34} {p['type']:<6} "
                f"{p['rows_examined']:>9,.0f}  {'yes' if p['filesort'] else 'no'}"
            )
    conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mariadb_drivers")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("QUEUECORE_BENCH_MARIADB_DSN", "mysql://root@127.0.0.1:3306"),
    )
    parser.add_argument("--jobs", type=int, default=2000, help="per driver and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-plans", action="store_true")
    args = parser.parse_args(argv)
    server = urlsplit(args.dsn)
    with scratch(server) as database:
        measure(server, database, args.jobs, args.rounds)
        facts(server, database)
        if not args.skip_plans:
            plans(server, database)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

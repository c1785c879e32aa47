"""``deploy/compose.yaml`` mirrors ``scripts/cluster.sh`` and the pins, checked without a container engine.

There is no Docker here, so nothing below starts a container. The compose file, both Dockerfiles, the
Connect server's confs and jar list and the proxy's config are parsed and held against their sources
of truth: ``scripts/cluster.py`` (components, classes, sizes, ``connect_confs``), ``core/config.py``
(the variable names), ``core.engine`` (the Delta confs and jar coordinates), ``requirements.txt``
and the jar files ``make jars`` resolved. Each check is a function of the parsed documents, so the
last tests run some of them on broken copies and see them fail.
"""

from __future__ import annotations

import copy
import glob
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from core.engine import DELTA_CATALOG, DELTA_EXTENSION, delta_packages, offline_jars
from tests.cluster_support import cluster_script

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
SPARK_DIR = DEPLOY / "spark-connect"

CONNECT = "spark-connect"
CONNECT_PORT = 15002
MASTER_PORT = 7077
APP_PORT = 8501
APP_REPLICAS = ("oreo-app-1", "oreo-app-2")
OBJECT_STORE = "object-store"
BUCKET_INIT = "object-store-init"
# The variables every Oreo process of a deployment needs: core/config.py's three, and the standard AWS
# variables the S3 clients (s3a, DuckDB httpfs, delta-rs) read.
OREO_VARS = ("SPARK_REMOTE", "OREO_DATABASE_URL", "DELTA_DATA_ROOT")
AWS_VARS = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
# Confs whose values are addresses: loopback in cluster.py, the compose network here.
ADDRESS_CONFS = {
    "spark.connect.grpc.binding.address": "0.0.0.0",
    "spark.driver.bindAddress": "0.0.0.0",
    "spark.driver.host": CONNECT,
}
S3A_CONFS = {
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
}


# ---------------------------------------------------------------- parsing


cluster = cluster_script()


def interpolate(value: str) -> str:
    """``value`` as compose reads it with no variables set: ``${NAME:-default}`` is the default."""
    assert not re.search(r"\$\{\w+\}", value.replace("$$", "")), f"{value!r} needs a variable without a default"
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value.replace("$$", "\0")).replace("\0", "$")


def load_compose(text: str | None = None) -> dict[str, Any]:
    return dict(yaml.safe_load(text if text is not None else (DEPLOY / "compose.yaml").read_text()))


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined and comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def parse_conf(text: str) -> dict[str, str]:
    """A Spark properties file (``key value`` lines) as a dict; a key twice is refused."""
    confs: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split(None, 1)
            assert key not in confs, f"{key} is set twice"
            confs[key] = value.strip()
    return confs


def parse_jars(text: str) -> list[tuple[str, str, str, str]]:
    """(group, artifact, version, sha1) of each line of jars.txt."""
    jars = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            coordinate, sha1 = line.split()
            group, artifact, version = coordinate.split(":")
            jars.append((group, artifact, version, sha1))
    return jars


def requirement_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    assert isinstance(raw, dict), "environment is written as a mapping"
    return {str(k): interpolate(str(v)) for k, v in raw.items()}


def command(service: dict[str, Any]) -> list[str]:
    raw = service.get("command")
    assert isinstance(raw, list), "command is written as a list"
    return [str(part) for part in raw]


def option(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def published_ports(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port of ``ports`` entries (``[ip:]host:container``)."""
    mapping = {}
    for entry in service.get("ports", []):
        *_, host, container = str(entry).split(":")
        mapping[int(container)] = int(host)
    return mapping


# ---------------------------------------------------------------- the checks


def check_components(compose: dict[str, Any]) -> None:
    """Every process cluster.sh starts is a service here, with the class and sizes cluster.py gives it."""
    svc = services(compose)
    workers = [f"spark-worker-{i}" for i in range(1, cluster.WORKERS + 1)]
    expected = {"spark-master", *workers, CONNECT, "postgres", OBJECT_STORE, BUCKET_INIT}
    assert expected <= set(svc), f"missing services: {sorted(expected - set(svc))}"
    assert not {n for n in svc if n.startswith("spark-worker")} - set(workers), "more workers than cluster.py"

    master = command(svc["spark-master"])
    assert master[:2] == ["spark-class", cluster.MASTER_CLASS]
    assert option(master, "--port") == str(MASTER_PORT)
    assert option(master, "--host") == "spark-master"
    for name in workers:
        args = command(svc[name])
        assert args[:2] == ["spark-class", cluster.WORKER_CLASS], name
        assert option(args, "--host") == name
        assert option(args, "--cores") == str(cluster.WORKER_CORES), name
        assert option(args, "--memory") == cluster.WORKER_MEMORY, name
        assert args[-1] == f"spark://spark-master:{MASTER_PORT}", name
    for name in ("spark-master", *workers):
        assert env(svc[name]).get("SPARK_DAEMON_MEMORY") == cluster.DAEMON_MEMORY, name
    connect = env(svc[CONNECT])
    # spark-submit would size a server class's driver by SPARK_DAEMON_MEMORY and ignore --driver-memory.
    assert "SPARK_DAEMON_MEMORY" not in connect
    assert connect["SPARK_DRIVER_MEMORY"] == cluster.DRIVER_MEMORY
    assert connect["SPARK_MASTER_URL"] == f"spark://spark-master:{MASTER_PORT}"
    assert "command" not in svc[CONNECT], "the Connect server runs the image's start-connect.sh"
    assert svc[CONNECT]["build"]["dockerfile"] == "deploy/spark-connect/Dockerfile"


def check_start_script(script: str) -> None:
    """start-connect.sh runs spark-submit the way cluster.connect_command does."""
    assert '"$SPARK_HOME/bin/spark-submit"' in script
    assert f"--class {cluster.CONNECT_CLASS}" in script
    assert '--master "$SPARK_MASTER_URL"' in script
    assert '--driver-memory "${SPARK_DRIVER_MEMORY:-' + cluster.DRIVER_MEMORY + '}"' in script
    assert '--jars "$(cat /opt/oreo-jars/jars.list)"' in script
    assert "--properties-file /opt/oreo-spark/spark-connect.conf" in script
    for conf, variable in (
        ("spark.hadoop.fs.s3a.endpoint", "AWS_ENDPOINT_URL"),
        ("spark.hadoop.fs.s3a.endpoint.region", "AWS_REGION"),
        ("spark.hadoop.fs.s3a.access.key", "AWS_ACCESS_KEY_ID"),
        ("spark.hadoop.fs.s3a.secret.key", "AWS_SECRET_ACCESS_KEY"),
    ):
        assert f'--conf "{conf}=${variable}"' in script, conf
    assert script.rstrip().endswith("spark-internal")


def check_connect_confs(confs: dict[str, str]) -> None:
    """The Connect server's confs are cluster.connect_confs() (so core.engine.session_confs), addresses aside."""
    expected = {**cluster.connect_confs(CONNECT_PORT), **ADDRESS_CONFS}
    spark_confs = {k: v for k, v in confs.items() if not k.startswith("spark.hadoop.fs.s3")}
    assert spark_confs == expected
    assert confs["spark.sql.extensions"] == DELTA_EXTENSION
    assert confs["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    for key, value in S3A_CONFS.items():
        assert confs.get(key) == value, key


def check_ports(compose: dict[str, Any], nginx: str, app_dockerfile: str, confs: dict[str, str]) -> None:
    svc = services(compose)
    # Spark Connect: the conf, SPARK_REMOTE, the healthcheck and the loopback port for host clients.
    assert confs["spark.connect.grpc.binding.port"] == str(CONNECT_PORT)
    for name in APP_REPLICAS:
        remote = urlsplit(env(svc[name])["SPARK_REMOTE"])
        assert (remote.scheme, remote.hostname, remote.port) == ("sc", CONNECT, CONNECT_PORT), name
    assert f"('localhost', {CONNECT_PORT})" in " ".join(svc[CONNECT]["healthcheck"]["test"])
    assert published_ports(svc[CONNECT]) == {CONNECT_PORT: CONNECT_PORT}
    assert all(str(p).startswith("127.0.0.1:") for p in svc[CONNECT]["ports"]), "Connect has no auth: loopback only"
    # The app: its image's port, the replicas', the proxy's upstreams and the front door.
    instructions = dockerfile_instructions(app_dockerfile)
    assert ("EXPOSE", str(APP_PORT)) in instructions
    assert any(k == "CMD" and f"--server.port={APP_PORT}" in v for k, v in instructions)
    for name in APP_REPLICAS:
        assert [str(p) for p in svc[name]["expose"]] == [str(APP_PORT)], name
        assert f"localhost:{APP_PORT}/_stcore/health" in " ".join(svc[name]["healthcheck"]["test"]), name
    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", nginx, flags=re.M)
    assert sorted(upstreams) == sorted((name, str(APP_PORT)) for name in APP_REPLICAS)
    listen = re.search(r"^\s*listen\s+(\d+);", nginx, flags=re.M)
    assert listen is not None
    assert published_ports(svc["proxy"]) == {int(listen.group(1)): APP_PORT}
    # The master.
    assert str(MASTER_PORT) in [str(p) for p in svc["spark-master"]["expose"]]


def check_app_env(compose: dict[str, Any], config_source: str) -> None:
    """Every replica and the Connect server get the variables they need, named as core/config.py reads them."""
    svc = services(compose)
    read_by_config = set(re.findall(r'"((?:OREO|SPARK|DELTA)_\w+)"', config_source))
    assert set(OREO_VARS) <= read_by_config, f"core/config.py reads {sorted(read_by_config)}"
    first = env(svc[APP_REPLICAS[0]])
    for name in APP_REPLICAS:
        values = env(svc[name])
        assert values == first, f"{name} differs from {APP_REPLICAS[0]}"
        missing = [v for v in (*OREO_VARS, *AWS_VARS) if not values.get(v)]
        assert not missing, f"{name} lacks {missing}"
        unknown = {v for v in values if v.startswith("OREO_")} - read_by_config
        assert not unknown, f"{name} sets variables core/config.py does not read: {sorted(unknown)}"
    assert env(svc["catalog-migrate"]) == first
    connect = env(svc[CONNECT])
    assert {v: connect.get(v) for v in AWS_VARS} == {v: first[v] for v in AWS_VARS}

    database = urlsplit(first["OREO_DATABASE_URL"])
    pg = env(svc["postgres"])
    assert database.scheme == "postgresql+psycopg"
    assert (database.hostname, database.port) == ("postgres", 5432)
    assert (database.username, database.password, database.path) == (
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        f"/{pg['POSTGRES_DB']}",
    )

    store = env(svc[OBJECT_STORE])
    endpoint = urlsplit(first["AWS_ENDPOINT_URL"])
    assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", OBJECT_STORE, 9000)
    assert published_ports(svc[OBJECT_STORE]).get(9000) == 9000
    assert (first["AWS_ACCESS_KEY_ID"], first["AWS_SECRET_ACCESS_KEY"]) == (
        store["MINIO_ROOT_USER"],
        store["MINIO_ROOT_PASSWORD"],
    )
    root = urlsplit(first["DELTA_DATA_ROOT"])
    assert root.scheme == "s3" and root.path.strip("/"), "DELTA_DATA_ROOT is s3://bucket/prefix"
    init = " ".join(command(svc[BUCKET_INIT]))
    assert f"mc mb --ignore-existing store/{root.hostname}" in init, "the init service creates the data bucket"
    assert "http://object-store:9000" in init


def check_pins(compose: dict[str, Any], spark_dockerfile: str, app_dockerfile: str, jars_text: str) -> None:
    """The Spark image carries requirements.txt's pyspark, the Delta jars of the pinned delta-spark and
    the hadoop-aws of pyspark's Hadoop; both images share a base; PostgreSQL is the tests' major."""
    pins = requirement_pins()
    spark = dockerfile_instructions(spark_dockerfile)
    app = dockerfile_instructions(app_dockerfile)
    assert ("ARG", f"PYSPARK_VERSION={pins['pyspark']}") in spark
    assert any(k == "RUN" and '"pyspark[connect]==${PYSPARK_VERSION}"' in v for k, v in spark)
    assert [v for k, v in spark if k == "FROM"] == [v for k, v in app if k == "FROM"]
    assert ("COPY", "deploy/spark-connect/jars.txt /opt/oreo-jars/jars.txt") in spark
    assert any(k == "RUN" and "sha1sum -c" in v for k, v in spark), "every jar is checked against its sha1"

    jars = parse_jars(jars_text)
    coordinates = {f"{g}:{a}": v for g, a, v, _ in jars}
    assert len(coordinates) == len(jars), "a jar is listed twice"
    assert all(re.fullmatch(r"[0-9a-f]{40}", sha1) for *_, sha1 in jars)
    delta_group, delta_artifact, delta_version = delta_packages().split(":")
    assert delta_version == pins["delta-spark"]
    assert coordinates.get(f"{delta_group}:{delta_artifact}") == delta_version
    assert coordinates.get("io.delta:delta-storage") == delta_version
    import pyspark

    spark_hadoop = {
        Path(p).name.removeprefix("hadoop-client-api-").removesuffix(".jar")
        for p in glob.glob(str(Path(pyspark.__file__).parent / "jars" / "hadoop-client-api-*.jar"))
    }
    assert coordinates.get("org.apache.hadoop:hadoop-aws") in spark_hadoop, f"pyspark's Hadoop is {spark_hadoop}"
    assert "software.amazon.awssdk:bundle" in coordinates

    # The Delta part is exactly what `make jars` resolved (cluster.py's --jars), byte for byte.
    resolved = offline_jars()
    assert resolved is not None, "no complete Delta jar folder: run `make jars`"
    listed = {f"{g}_{a}-{v}.jar": sha1 for g, a, v, sha1 in jars}
    s3 = {"org.apache.hadoop_hadoop-aws", "software.amazon.awssdk_bundle"}
    delta_part = {name for name in listed if not any(name.startswith(f"{prefix}-") for prefix in s3)}
    assert delta_part == {p.name for p in resolved}
    for path in resolved:
        assert hashlib.sha1(path.read_bytes()).hexdigest() == listed[path.name], path.name

    for name, service in services(compose).items():
        if str(service.get("image", "")).startswith("oreo-spark:"):
            assert service["image"] == f"oreo-spark:{pins['pyspark']}", name

    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    assert installed, "PostgreSQL is not installed: run scripts/install_postgres.sh (make test does)"
    tests_major = Path(installed[-1]).parent.parent.name
    image = str(services(compose)["postgres"]["image"])
    assert re.fullmatch(rf"postgres:{tests_major}\.\d+(-\w+)?", image), f"{image} is not PostgreSQL {tests_major}"


def check_proxy(nginx: str) -> None:
    """Sticky upstream (Streamlit keeps a tab's session in one replica) and the websocket upgrade."""
    upstream = re.search(r"upstream\s+(\w+)\s*\{(.*?)\}", nginx, flags=re.S)
    assert upstream is not None, "no upstream block"
    name, body = upstream.groups()
    assert re.search(r"^\s*(ip_hash|hash\s+\$remote_addr\s+consistent|sticky\s+\w+.*);", body, flags=re.M), (
        "the upstream is not sticky"
    )
    assert f"proxy_pass http://{name};" in nginx
    assert "proxy_http_version 1.1;" in nginx
    assert re.search(r"proxy_set_header\s+Upgrade\s+\$http_upgrade;", nginx)
    assert re.search(r"proxy_set_header\s+Connection\s+\$connection_upgrade;", nginx)
    assert re.search(r"map\s+\$http_upgrade\s+\$connection_upgrade\s*\{[^}]*default\s+upgrade;", nginx)
    timeout = re.search(r"proxy_read_timeout\s+(\w+);", nginx)
    assert timeout is not None and timeout.group(1) not in {"60", "60s"}, "websockets idle longer than 60 s"


def check_upload_limit(compose: dict[str, Any], nginx: str) -> None:
    limit = re.search(r"client_max_body_size\s+(\d+)m;", nginx)
    assert limit is not None
    assert env(services(compose)[APP_REPLICAS[0]])["OREO_MAX_UPLOAD_MB"] == limit.group(1)


def check_images_pinned(compose: dict[str, Any], dockerfiles: list[str]) -> None:
    """Every image pulled (not built here) and every base image names a version."""
    built = {str(s["image"]) for s in services(compose).values() if "build" in s}
    images = [str(s["image"]) for s in services(compose).values() if "image" in s and s["image"] not in built]
    images += [v.split()[0] for text in dockerfiles for k, v in dockerfile_instructions(text) if k == "FROM"]
    for image in images:
        tag = image.rpartition(":")[2] if ":" in image else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{image} is not pinned to a version"


def check_dependencies(compose: dict[str, Any]) -> None:
    """depends_on always names a condition the target can meet; data lives in named volumes."""
    svc = services(compose)
    for name, service in svc.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        for target, rule in depends.items():
            assert target in svc, f"{name} depends on unknown {target}"
            condition = rule["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in svc[target], f"{name} waits for {target}'s health, which has no check"
            else:
                assert condition == "service_completed_successfully", f"{name} -> {target}: {condition}"
                assert svc[target].get("restart") == "no", f"{target} is a one-shot service"
    long_running = [n for n, s in svc.items() if s.get("restart") != "no" and "cli" not in s.get("profiles", [])]
    for name in long_running:
        assert "healthcheck" in svc[name], f"{name} has no healthcheck"
    declared = set(compose.get("volumes") or {})
    for name, service in svc.items():
        for mount in service.get("volumes", []):
            source = str(mount).split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
    for name, path in (("postgres", "/var/lib/postgresql/data"), (OBJECT_STORE, "/data")):
        mounts = [str(m) for m in svc[name].get("volumes", [])]
        assert any(m.endswith(f":{path}") and m.split(":")[0] in declared for m in mounts), f"{name} data"


API_PORT = 8600
API = "oreo-api"


def check_api(compose: dict[str, Any], nginx: str, app_dockerfile: str) -> None:
    """The HTTP API (issue 15): its image exposes 8600, compose runs `oreo api` there, the proxy routes /api/ to it."""
    instructions = dockerfile_instructions(app_dockerfile)
    assert ("EXPOSE", str(API_PORT)) in instructions
    assert ("COPY", "api ./api") in instructions, "the image must carry the api package"
    svc = services(compose)[API]
    command = svc["command"]
    assert command[:2] == ["oreo", "api"] and command[command.index("--port") + 1] == str(API_PORT)
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert [str(p) for p in svc["expose"]] == [str(API_PORT)]
    assert f"localhost:{API_PORT}/api/v1/health" in " ".join(svc["healthcheck"]["test"])
    assert env(svc) == env(services(compose)[APP_REPLICAS[0]]), "the API needs the app's catalog and cluster"
    assert re.search(rf"location ~ \^/\(api/[^\n]*\n\s*proxy_pass http://{API}:{API_PORT};", nginx)


# ---------------------------------------------------------------- the tests


def _text(path: Path) -> str:
    return path.read_text()


@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    return {
        "compose": load_compose(),
        "nginx": _text(DEPLOY / "proxy" / "nginx.conf"),
        "app_dockerfile": _text(REPO / "Dockerfile"),
        "spark_dockerfile": _text(SPARK_DIR / "Dockerfile"),
        "confs": parse_conf(_text(SPARK_DIR / "spark-connect.conf")),
        "jars": _text(SPARK_DIR / "jars.txt"),
        "script": _text(SPARK_DIR / "start-connect.sh"),
        "config": _text(REPO / "core" / "config.py"),
    }


def test_services_mirror_the_cluster_script(docs: dict[str, Any]) -> None:
    check_components(docs["compose"])
    check_start_script(docs["script"])


def test_connect_server_runs_with_the_engine_confs(docs: dict[str, Any]) -> None:
    check_connect_confs(docs["confs"])


def test_ports_line_up(docs: dict[str, Any]) -> None:
    check_ports(docs["compose"], docs["nginx"], docs["app_dockerfile"], docs["confs"])


def test_the_api_is_exposed_run_and_routed(docs: dict[str, Any]) -> None:
    check_api(docs["compose"], docs["nginx"], docs["app_dockerfile"])


def test_api_check_fails_on_a_wrong_port(docs: dict[str, Any]) -> None:
    broken = copy.deepcopy(docs["compose"])
    broken["services"][API]["command"] = ["oreo", "api", "--host", "0.0.0.0", "--port", "8601"]
    with pytest.raises(AssertionError):
        check_api(broken, docs["nginx"], docs["app_dockerfile"])
    with pytest.raises(AssertionError):
        check_api(docs["compose"], docs["nginx"].replace("oreo-api:8600", "oreo-api:9000"), docs["app_dockerfile"])


def test_every_replica_gets_the_variables_config_reads(docs: dict[str, Any]) -> None:
    check_app_env(docs["compose"], docs["config"])
    check_upload_limit(docs["compose"], docs["nginx"])


def test_versions_match_the_pins(docs: dict[str, Any]) -> None:
    check_pins(docs["compose"], docs["spark_dockerfile"], docs["app_dockerfile"], docs["jars"])


def test_proxy_is_sticky_and_passes_websockets(docs: dict[str, Any]) -> None:
    check_proxy(docs["nginx"])


def test_images_are_pinned_and_dependencies_have_conditions(docs: dict[str, Any]) -> None:
    check_images_pinned(docs["compose"], [docs["app_dockerfile"], docs["spark_dockerfile"]])
    check_dependencies(docs["compose"])


def test_cluster_script_builds_its_command_from_connect_confs() -> None:
    """The list the compose server is compared with is the one cluster.sh's server really gets."""
    confs = cluster.connect_confs(CONNECT_PORT)
    argv = cluster.connect_command("spark://127.0.0.1:1", CONNECT_PORT) if offline_jars() else None
    assert argv is not None, "no complete Delta jar folder: run `make jars`"
    passed = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--conf")
    assert passed == confs
    assert argv[argv.index("--class") + 1] == cluster.CONNECT_CLASS
    assert argv[argv.index("--driver-memory") + 1] == cluster.DRIVER_MEMORY


# ---------------------------------------------------------------- the checks can fail


def _set(path: list[str], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _drop(path: list[str]) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


COMPOSE_BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], None]]] = {
    "a worker missing": (_drop(["services", "spark-worker-2"]), check_components),
    "a worker with more memory": (
        lambda c: _set(
            ["services", "spark-worker-1", "command"],
            ["2g" if part == cluster.WORKER_MEMORY else part for part in c["services"]["spark-worker-1"]["command"]],
        )(c),
        check_components,
    ),
    "daemon memory on the Connect server": (
        _set(["services", CONNECT, "environment", "SPARK_DAEMON_MEMORY"], "256m"),
        check_components,
    ),
    "an image on latest": (
        _set(["services", "postgres", "image"], "postgres:latest"),
        lambda c: check_images_pinned(c, []),
    ),
    "an untagged image": (_set(["services", "proxy", "image"], "nginx"), lambda c: check_images_pinned(c, [])),
    "depends_on without a condition": (
        _set(["services", "proxy", "depends_on"], ["oreo-app-1", "oreo-app-2"]),
        check_dependencies,
    ),
    "waiting on the health of a service without a check": (
        _drop(["services", "postgres", "healthcheck"]),
        check_dependencies,
    ),
}


@pytest.mark.parametrize("breakage", sorted(COMPOSE_BREAKAGES))
def test_compose_checks_fail_on_a_broken_copy(docs: dict[str, Any], breakage: str) -> None:
    mutate, check = COMPOSE_BREAKAGES[breakage]
    broken = copy.deepcopy(docs["compose"])
    mutate(broken)
    with pytest.raises(AssertionError):
        check(broken)


def _with_app_env(name: str, value: str | None) -> dict[str, Any]:
    """The compose file with one variable of x-oreo-env changed (None: removed) for every Oreo container.

    YAML aliases load as one object, so changing the anchor's mapping changes every service using it.
    """
    broken = load_compose()
    shared = broken["x-oreo-env"]
    assert all(broken["services"][name]["environment"] is shared for name in (*APP_REPLICAS, "catalog-migrate"))
    if value is None:
        del shared[name]
    else:
        shared[name] = value
    return broken


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SPARK_REMOTE", None),
        ("AWS_REGION", None),
        ("OREO_DATABASE_URL", "postgresql+psycopg://oreo:wrong@postgres:5432/oreo"),
        ("OREO_DATABASE_URL", "postgresql://oreo:oreo-demo-password@postgres:5432/oreo"),
        ("AWS_ENDPOINT_URL", "http://object-store:9001"),
        ("AWS_SECRET_ACCESS_KEY", "not-the-store-password"),
        ("DELTA_DATA_ROOT", "s3://another-bucket/delta"),
        ("OREO_DATA_ROOT", "s3://oreo-data/delta"),  # a misspelt name core/config.py never reads
    ],
)
def test_env_check_fails_on_a_wrong_variable(docs: dict[str, Any], name: str, value: str | None) -> None:
    with pytest.raises(AssertionError):
        check_app_env(_with_app_env(name, value), docs["config"])


def test_env_check_fails_when_replicas_differ(docs: dict[str, Any]) -> None:
    broken = load_compose()
    replica = broken["services"]["oreo-app-2"]
    replica["environment"] = {**replica["environment"], "OREO_PAGE_SIZE": "10"}
    with pytest.raises(AssertionError):
        check_app_env(broken, docs["config"])


def test_ports_check_fails_on_a_wrong_connect_port(docs: dict[str, Any]) -> None:
    broken = _with_app_env("SPARK_REMOTE", "sc://spark-connect:15003")
    check_app_env(broken, docs["config"])  # the same everywhere: only the port check sees it
    with pytest.raises(AssertionError):
        check_ports(broken, docs["nginx"], docs["app_dockerfile"], docs["confs"])


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.sql.extensions", "io.delta.sql.SomethingElse"),
        ("spark.sql.shuffle.partitions", "200"),
        ("spark.hadoop.fs.s3a.path.style.access", "false"),
    ],
)
def test_conf_check_fails_on_a_changed_conf(docs: dict[str, Any], key: str, value: str) -> None:
    with pytest.raises(AssertionError):
        check_connect_confs({**docs["confs"], key: value})
    dropped = {k: v for k, v in docs["confs"].items() if k != key}
    with pytest.raises(AssertionError):
        check_connect_confs(dropped)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("hash $remote_addr consistent;", ""),
        ("proxy_set_header Upgrade $http_upgrade;", ""),
        ("proxy_http_version 1.1;", "proxy_http_version 1.0;"),
    ],
)
def test_proxy_check_fails_without_stickiness_or_upgrade(docs: dict[str, Any], old: str, new: str) -> None:
    assert old in docs["nginx"]
    with pytest.raises(AssertionError):
        check_proxy(docs["nginx"].replace(old, new))


@pytest.mark.parametrize(
    ("document", "old", "new"),
    [
        ("spark_dockerfile", "ARG PYSPARK_VERSION=", "ARG PYSPARK_VERSION=0."),
        ("jars", "io.delta:delta-spark_4.1_2.13:4.4.0 ", "io.delta:delta-spark_4.1_2.13:4.3.0 "),
        ("jars", "org.apache.hadoop:hadoop-aws:3.4.2 ", "org.apache.hadoop:hadoop-aws:3.3.4 "),
        ("jars", "4861648f070c9596e0c5823c55921de365dce4d0", "0" * 40),
        ("compose", "postgres:15.", "postgres:99."),
    ],
)
def test_pin_check_fails_on_a_drifted_version(docs: dict[str, Any], document: str, old: str, new: str) -> None:
    texts = {
        "spark_dockerfile": docs["spark_dockerfile"],
        "jars": docs["jars"],
        "compose": (DEPLOY / "compose.yaml").read_text(),
    }
    assert old in texts[document]
    texts[document] = texts[document].replace(old, new)
    with pytest.raises(AssertionError):
        check_pins(load_compose(texts["compose"]), texts["spark_dockerfile"], docs["app_dockerfile"], texts["jars"])


def test_interpolation_takes_defaults_and_refuses_bare_variables() -> None:
    assert interpolate("a:${PW:-secret}@b") == "a:secret@b"
    assert interpolate('"$$HOME"') == '"$HOME"'
    with pytest.raises(AssertionError):
        interpolate("${PW}")


def test_the_app_image_dumps_the_jvm_class_archive_after_resolving_the_jars() -> None:
    """Containers start Spark with the class archive too (core.engine.driver_java_options finds it by the jars)."""
    runs = [v for k, v in dockerfile_instructions(_text(REPO / "Dockerfile")) if k == "RUN"]
    jars = next(i for i, v in enumerate(runs) if "scripts/fetch_jars.py" in v)
    step = runs[jars]
    assert "scripts/jvm_archive.py" in step and step.index("fetch_jars.py") < step.index("jvm_archive.py")
    assert any("pip install --no-deps -e ." in v for v in runs[:jars]), "the archive is made from the installed app"

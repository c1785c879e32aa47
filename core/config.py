"""Settings, read once from the environment.

Every setting is documented in docs/settings.md. Tests change the environment and call
``get_settings.cache_clear()``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from core.errors import InvalidInput
from core.storage import Location, is_object_uri, location


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidInput(f"setting {name} must be an integer, got {raw!r}", field=name) from exc


def _positive(name: str, default: int) -> int:
    value = _int(name, default)
    if value < 1:
        raise InvalidInput(f"setting {name} must be at least 1, got {value}", field=name)
    return value


def _between(name: str, default: int, low: int, high: int) -> int:
    value = _int(name, default)
    if not low <= value <= high:
        raise InvalidInput(f"setting {name} must be between {low} and {high}, got {value}", field=name)
    return value


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = (os.environ.get(name) or default).strip().lower()
    if raw not in choices:
        raise InvalidInput(f"setting {name} must be one of {', '.join(choices)}, got {raw!r}", field=name)
    return raw


def _hosts(name: str) -> tuple[str, ...]:
    """A comma-separated list of host names or addresses, lower-cased, without brackets or a trailing dot."""
    names = (part.strip().lower().strip("[]").rstrip(".") for part in os.environ.get(name, "").split(","))
    return tuple(n for n in names if n)


def _folders(name: str) -> tuple[Path, ...]:
    """Absolute folders separated by ``os.pathsep`` or commas; unset or empty: none."""
    parts = (part.strip() for chunk in os.environ.get(name, "").split(os.pathsep) for part in chunk.split(","))
    folders = tuple(Path(part).expanduser() for part in parts if part)
    for folder in folders:
        if not folder.is_absolute():
            raise InvalidInput(f"setting {name} must list absolute folders, got {str(folder)!r}", field=name)
    return folders


def _group_roles(raw: str) -> dict[str, tuple[str, ...]]:
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            'setting OREO_OIDC_GROUP_ROLES must be JSON like {"group": ["project:role"]}', field="OREO_OIDC_GROUP_ROLES"
        ) from exc
    if not isinstance(parsed, dict):
        raise InvalidInput("setting OREO_OIDC_GROUP_ROLES must be a JSON object", field="OREO_OIDC_GROUP_ROLES")
    return {str(group): tuple(str(g) for g in grants) for group, grants in parsed.items()}


@dataclass(frozen=True)
class Settings:
    """Process-wide configuration."""

    data_root: Location  # a local folder, or s3://bucket/prefix (core.storage)
    database_url: str
    spark_remote: str | None = None
    spark_master: str = "local[*]"
    spark_shuffle_partitions: int = 4
    spark_driver_memory: str = "2g"
    session_ttl_hours: int = 72
    web_session_idle_hours: int = 12
    web_session_max_days: int = 7
    # Accounts (core.auth, core.tokens): the shortest password accepted; API tokens' lifetime when none is given
    # (0: they do not expire unless asked).
    password_min_length: int = 8
    token_default_days: int = 90
    import_ttl_hours: int = 24
    # Folders a site admin may import from by server path over the API (core.import_folders); none: uploads only.
    import_folders: tuple[Path, ...] = ()
    restore_window_days: int = 90
    small_file_mb: int = 1
    read_cache_mb: int = 2048
    max_upload_mb: int = 200
    # The largest JSON request body the HTTP API reads (uploads count against max_upload_mb).
    max_json_mb: int = 4
    writer_wait_s: float = 300.0
    writer_lease_s: float = 3600.0
    page_size: int = 50
    # The most rows one bulk change ("change matching rows", core.bulk) may touch.
    max_bulk_rows: int = 1_000_000
    # The CPU seconds one bulk find-and-replace may spend matching over all its matching values.
    bulk_regex_s: int = 10
    demo_rows: int = 100_000
    # Nearest-neighbour clustering (core.clusters) of a column with at most this many distinct values.
    cluster_max_values: int = 20_000
    oidc_groups_claim: str = "groups"
    oidc_group_roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Notifications (core.notify): email over SMTP is on when a host is set.
    smtp_host: str | None = None
    smtp_port: int = 0  # 0: the TLS mode's usual port (25, 587 or 465)
    smtp_tls: str = "starttls"
    smtp_user: str | None = None
    smtp_password: str | None = None
    smtp_from: str = "oreo@localhost"
    smtp_ca_file: Path | None = None  # a CA bundle to trust for the SMTP server's certificate (else the system's)
    notify_interval_s: int = 30
    # Webhooks may only reach public addresses, except the hosts (names or addresses) listed here.
    webhook_allowed_hosts: tuple[str, ...] = ()
    delivery_deadline_s: float = 10.0  # the whole of one email or webhook delivery, connect to answer
    # Presence (core.presence): a person leaves a page this long after its last heartbeat; pages beat and
    # look for news every presence_refresh_s (0: no presence, no live notices).
    presence_idle_s: int = 60
    presence_refresh_s: int = 5
    # How many small MERGEs a server's engine warm-up runs on its scratch table (core.warmup);
    # 0: none (replicas whose Spark Connect server another replica has warmed already).
    warm_up_rounds: int = 3

    @classmethod
    def from_env(cls) -> Settings:
        raw_root = os.environ.get("DELTA_DATA_ROOT") or "data/delta"
        data_root: Location
        if is_object_uri(raw_root):
            data_root = location(raw_root)
            # The catalog is a database, never an object: without OREO_DATABASE_URL it stays local.
            default_db = f"sqlite:///{Path('data/oreo-catalog.db').absolute()}"
        else:
            data_root = Path(raw_root).expanduser().absolute()
            default_db = f"sqlite:///{data_root.parent / 'oreo-catalog.db'}"
        return cls(
            data_root=data_root,
            database_url=os.environ.get("OREO_DATABASE_URL") or default_db,
            spark_remote=os.environ.get("SPARK_REMOTE") or None,
            spark_master=os.environ.get("OREO_SPARK_MASTER") or "local[*]",
            spark_shuffle_partitions=_int("OREO_SPARK_SHUFFLE_PARTITIONS", 4),
            spark_driver_memory=os.environ.get("OREO_SPARK_DRIVER_MEMORY") or "2g",
            session_ttl_hours=_int("OREO_SESSION_TTL_HOURS", 72),
            web_session_idle_hours=_int("OREO_SESSION_IDLE_HOURS", 12),
            web_session_max_days=_int("OREO_SESSION_MAX_DAYS", 7),
            password_min_length=_positive("OREO_PASSWORD_MIN_LENGTH", 8),
            token_default_days=_between("OREO_TOKEN_DEFAULT_DAYS", 90, 0, 3650),
            import_ttl_hours=_int("OREO_IMPORT_TTL_HOURS", 24),
            import_folders=_folders("OREO_IMPORT_FOLDERS"),
            restore_window_days=_int("OREO_RESTORE_WINDOW_DAYS", 90),
            small_file_mb=_int("OREO_SMALL_FILE_MB", 1),
            read_cache_mb=_int("OREO_READ_CACHE_MB", 2048),
            max_upload_mb=_int("OREO_MAX_UPLOAD_MB", 200),
            max_json_mb=_int("OREO_MAX_JSON_MB", 4),
            writer_wait_s=float(_int("OREO_WRITER_WAIT_S", 300)),
            writer_lease_s=float(_int("OREO_WRITER_LEASE_S", 3600)),
            page_size=_int("OREO_PAGE_SIZE", 50),
            demo_rows=_int("OREO_DEMO_ROWS", 100_000),
            cluster_max_values=_positive("OREO_CLUSTER_MAX_VALUES", 20_000),
            oidc_groups_claim=os.environ.get("OREO_OIDC_GROUPS_CLAIM") or "groups",
            max_bulk_rows=_positive("OREO_MAX_BULK_ROWS", 1_000_000),
            bulk_regex_s=_between("OREO_BULK_REGEX_S", 10, 1, 3600),
            oidc_group_roles=_group_roles(os.environ.get("OREO_OIDC_GROUP_ROLES", "")),
            smtp_host=os.environ.get("OREO_SMTP_HOST") or None,
            smtp_port=_int("OREO_SMTP_PORT", 0),
            smtp_tls=_choice("OREO_SMTP_TLS", "starttls", ("none", "starttls", "ssl")),
            smtp_user=os.environ.get("OREO_SMTP_USER") or None,
            smtp_password=os.environ.get("OREO_SMTP_PASSWORD") or None,
            smtp_from=os.environ.get("OREO_SMTP_FROM") or "oreo@localhost",
            smtp_ca_file=(
                Path(os.environ["OREO_SMTP_CA_FILE"]).expanduser() if os.environ.get("OREO_SMTP_CA_FILE") else None
            ),
            notify_interval_s=_int("OREO_NOTIFY_INTERVAL_S", 30),
            webhook_allowed_hosts=_hosts("OREO_WEBHOOK_ALLOWED_HOSTS"),
            delivery_deadline_s=float(_positive("OREO_DELIVERY_DEADLINE_S", 10)),
            presence_idle_s=_positive("OREO_PRESENCE_IDLE_S", 60),
            presence_refresh_s=_between("OREO_PRESENCE_REFRESH_S", 5, 0, 60),
            warm_up_rounds=_between("OREO_WARM_UP_ROUNDS", 3, 0, 20),
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read from the environment on first use."""
    return Settings.from_env()

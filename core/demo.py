"""The demo workspace: project ``demo``, dataset ``customers`` and three accounts.

Rows are generated from seeded pools of Faker values, so 100,000 realistic customers
take a second instead of minutes, and every run produces the same table. About one city
in twenty is spelled the way people type it (other case, stray or doubled spaces, accents
left off, a hyphen for a space, a typo), so a new user has near-duplicates to cluster.
"""

from __future__ import annotations

import tempfile
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core import auth, datasets, projects
from core.catalog import Catalog, DatasetRow, ProjectRow
from core.config import get_settings
from core.errors import NotFound

DEMO_PROJECT = "demo"
DEMO_DATASET = "customers"
DEMO_ACCOUNTS = (
    ("editor", auth.Role.EDITOR),
    ("approver", auth.Role.APPROVER),
    ("admin", auth.Role.ADMIN),
)
PLANS = ("free", "starter", "pro", "enterprise")
MISSPELT_SHARE = 0.05


def _plain(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def _swapped(text: str) -> str:
    middle = len(text) // 2
    return text[: middle - 1] + text[middle] + text[middle - 1] + text[middle + 1 :] if len(text) > 3 else text


# How people misspell a city: each keeps its fingerprint (the first five), its n-grams (the hyphen), or is a typo.
_MISSPELLINGS: tuple[Callable[[str], str], ...] = (
    str.lower,
    str.upper,
    lambda city: city + " ",
    lambda city: city.replace(" ", "  ", 1) if " " in city else " " + city,
    lambda city: _plain(city) if _plain(city) != city else city.lower(),
    lambda city: city.replace(" ", "-") if " " in city else city.replace("-", " "),
    _swapped,
)


def _misspelt(cities: np.ndarray, seed: int) -> np.ndarray:
    """``cities`` with about ``MISSPELT_SHARE`` of them misspelt; its own generator leaves the other columns alone."""
    rng = np.random.default_rng(seed + 1)
    chosen = np.flatnonzero(rng.random(len(cities)) < MISSPELT_SHARE)
    kinds = rng.integers(0, len(_MISSPELLINGS), len(chosen))
    out = cities.astype(object)
    for row, kind in zip(chosen, kinds, strict=True):
        out[row] = _MISSPELLINGS[kind](str(cities[row]))
    return out


@dataclass(frozen=True)
class DemoAccount:
    username: str
    role: str
    password: str | None


@dataclass(frozen=True)
class DemoResult:
    created: bool
    project: str
    dataset: str
    rows: int
    accounts: list[DemoAccount]


def customers_table(rows: int, seed: int = 7) -> pa.Table:
    """``rows`` synthetic customers with a unique integer ``customer_id``."""
    from faker import Faker

    fake = Faker(["en_US", "en_GB", "de_DE", "fr_FR"])
    Faker.seed(seed)
    rng = np.random.default_rng(seed)
    first = np.array([fake.first_name() for _ in range(600)])
    last = np.array([fake.last_name() for _ in range(900)])
    places = [(fake.city(), fake.current_country()) for _ in range(250)]
    cities = np.array([p[0] for p in places])
    countries = np.array([p[1] for p in places])
    domains = np.array(["example.com", "mail.test", "corp.example", "inbox.test", "post.example"])

    fi = rng.integers(0, len(first), rows)
    li = rng.integers(0, len(last), rows)
    pi = rng.integers(0, len(places), rows)
    di = rng.integers(0, len(domains), rows)
    ids = np.arange(100_001, 100_001 + rows)
    firsts = first[fi]
    lasts = last[li]
    emails = [
        f"{fn.lower()}.{ln.lower()}{i % 1000}@{d}".replace(" ", "").replace("'", "")
        for fn, ln, i, d in zip(firsts, lasts, ids, domains[di], strict=True)
    ]
    signup = np.datetime64("2019-01-01") + rng.integers(0, 365 * 6, rows).astype("timedelta64[D]")
    plan = np.array(PLANS)[rng.choice(len(PLANS), rows, p=[0.45, 0.3, 0.2, 0.05])]
    spend = np.round(rng.gamma(2.0, 40.0, rows) * (plan != "free"), 2)
    return pa.table(
        {
            "customer_id": pa.array(ids, pa.int64()),
            "first_name": pa.array(firsts),
            "last_name": pa.array(lasts),
            "email": pa.array(emails),
            "city": pa.array(_misspelt(cities[pi], seed), pa.string()),
            "country": pa.array(countries[pi]),
            "plan": pa.array(plan),
            "monthly_spend": pa.array(spend, pa.float64()),
            "signup_date": pa.array(signup, pa.date32()),
            "orders": pa.array(rng.poisson(6, rows), pa.int64()),
            "active": pa.array(rng.random(rows) > 0.12),
        }
    )


def seed_demo(catalog: Catalog, *, rows: int | None = None) -> DemoResult:
    """Create the demo workspace unless it exists. Passwords are returned only when made."""
    rows = rows or get_settings().demo_rows
    with catalog.session() as s:
        done = s.get(DatasetRow, (DEMO_PROJECT, DEMO_DATASET)) is not None
        has_project = s.get(ProjectRow, DEMO_PROJECT) is not None
    if done:
        info = datasets.get_dataset(catalog, DEMO_PROJECT, DEMO_DATASET, actor=auth.SYSTEM)
        accounts = [DemoAccount(name, role.value, None) for name, role in DEMO_ACCOUNTS]
        return DemoResult(False, DEMO_PROJECT, DEMO_DATASET, info.rows or 0, accounts)

    if not has_project:
        projects.create_project(catalog, DEMO_PROJECT, name="Demo project")
    accounts = []
    for name, role in DEMO_ACCOUNTS:
        try:
            auth.get_user(catalog, name)
            password = None
        except NotFound:
            _, password = auth.create_user(catalog, name, email=f"{name}@oreo.example", display_name=name.title())
        auth.add_member(catalog, DEMO_PROJECT, name, role)
        accounts.append(DemoAccount(name, role.value, password))
    with tempfile.TemporaryDirectory(prefix="oreo-demo-") as tmp:
        source = Path(tmp) / "customers.parquet"
        pq.write_table(customers_table(rows), source)
        info = datasets.create_dataset(catalog, DEMO_PROJECT, DEMO_DATASET, source, key="customer_id")
    return DemoResult(True, DEMO_PROJECT, DEMO_DATASET, info.rows or 0, accounts)

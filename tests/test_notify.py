"""Notifications: recipients, the outbox and its retries, webhooks and email on real loopback servers, the inbox."""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import select, text

from core import background, change_requests, notify
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, DatasetRow, InboxRow, OutboxRow, WebhookRow, utcnow
from core.config import get_settings
from core.errors import AlreadyExists, InvalidInput, NotFound, PermissionDenied
from core.projects import create_project
from tests.merge_support import wait_for
from tests.test_cli import assert_one_error_line, run

SECRET = "hook-secret-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Webhooks reach only public addresses unless listed: these tests list their loopback receivers (and a name)."""
    monkeypatch.setenv("OREO_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1,hooks.example.test")
    get_settings.cache_clear()


# ---------------------------------------------------------------- real servers on loopback


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    """A stdlib HTTP server on loopback that records every POST and answers with the next queued status."""

    url: str
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    port = free_port()
    box = Receiver(url=f"http://127.0.0.1:{port}/hook")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                box.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                status = box.statuses.pop(0) if box.statuses else 204
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield box
    server.shutdown()
    server.server_close()


class Mailbox:
    """An aiosmtpd handler that keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[Envelope, Any]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
        self.messages.append((envelope, message_from_bytes(envelope.content, policy=policy.default)))  # type: ignore[arg-type]
        return "250 OK"


def _authenticate(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (b"oreo", b"mail-pass")
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def smtp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Mailbox]:
    """A real SMTP server (aiosmtpd) on loopback, with LOGIN/PLAIN auth, and Oreo's settings pointing at it."""
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(
        mailbox, hostname="127.0.0.1", port=port, authenticator=_authenticate, auth_require_tls=False
    )
    controller.start()
    for name, value in {
        "OREO_SMTP_HOST": "127.0.0.1",
        "OREO_SMTP_PORT": str(port),
        "OREO_SMTP_TLS": "none",
        "OREO_SMTP_USER": "oreo",
        "OREO_SMTP_PASSWORD": "mail-pass",
        "OREO_SMTP_FROM": "oreo@example.test",
    }.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield mailbox
    controller.stop()
    get_settings.cache_clear()


# ---------------------------------------------------------------- a workspace with one open request


@pytest.fixture
def workspace(catalog: Catalog) -> Catalog:
    """Project demo: ed (editor, the author), al (approver), ada (admin, no email), eve (editor); one open request."""
    create_project(catalog, "demo")
    for name, role, email in (
        ("ed", Role.EDITOR, "ed@example.test"),
        ("al", Role.APPROVER, "al@example.test"),
        ("ada", Role.ADMIN, None),
        ("eve", Role.EDITOR, "eve@example.test"),
    ):
        create_user(catalog, name, password=f"{name}-password-1", email=email)
        add_member(catalog, "demo", name, role)
    with catalog.session() as s:
        s.add(DatasetRow(project_id="demo", dataset_id="people", created_by="ada", delta_version=0))
        s.flush()
        s.add(
            ChangeRequestRow(
                id="cr_0000000000000001",
                project_id="demo",
                dataset_id="people",
                author="ed",
                title="Fix ages",
                state="open",
                base_version=0,
                rows=1,
                cells=1,
            )
        )
    return catalog


CR = "cr_0000000000000001"


def _submitted(catalog: Catalog) -> int:
    return notify.emit(catalog, "submitted", project="demo", dataset="people", cr_id=CR, actor="ed")


def _hook(catalog: Catalog, url: str) -> notify.Webhook:
    return notify.add_webhook(catalog, "demo", url, SECRET, actor=get_user(catalog, "ada"))


def _outbox(catalog: Catalog) -> list[OutboxRow]:
    with catalog.session() as s:
        return list(s.scalars(select(OutboxRow).order_by(OutboxRow.id)))


def _inbox_of(catalog: Catalog, name: str) -> list[notify.InboxItem]:
    return notify.inbox(catalog, get_user(catalog, name))


# ---------------------------------------------------------------- who is told


def test_a_submitted_request_reaches_the_approvers_by_inbox_email_and_signed_webhook(
    workspace: Catalog, smtp: Mailbox, receiver: Receiver
) -> None:
    hook = _hook(workspace, receiver.url)
    assert _submitted(workspace) == 4  # inbox: al, ada; email: al (ada has none); webhook: 1

    assert [i.summary for i in _inbox_of(workspace, "al")] == ["ed submitted “Fix ages” on demo/people"]
    assert len(_inbox_of(workspace, "ada")) == 1
    assert _inbox_of(workspace, "ed") == [] and _inbox_of(workspace, "eve") == []
    assert [(r.channel, r.target) for r in _outbox(workspace)] == [("email", "al@example.test"), ("webhook", hook.id)]

    report = notify.drain(workspace)
    assert (len(report.sent), report.failed, report.dead) == (2, [], [])

    [(envelope, message)] = smtp.messages
    assert envelope.rcpt_tos == ["al@example.test"] and envelope.mail_from == "oreo@example.test"
    assert message["Subject"] == "[Oreo] ed submitted “Fix ages” on demo/people"
    assert f"Change request: {CR}" in message.get_content()

    [post] = receiver.received
    assert post.path == "/hook" and post.headers["content-type"] == "application/json"
    expected = "sha256=" + hmac.new(SECRET.encode(), post.body, "sha256").hexdigest()
    assert hmac.compare_digest(post.headers["x-oreo-signature"], expected)
    body = post.json()
    assert {k: body[k] for k in ("event", "project", "dataset", "cr_id", "actor", "title")} == {
        "event": "submitted",
        "project": "demo",
        "dataset": "people",
        "cr_id": CR,
        "actor": "ed",
        "title": "Fix ages",
    }
    assert body["at"].startswith(str(utcnow().year))
    assert notify.drain(workspace).sent == []  # sent once only


def test_comments_and_closing_reach_the_author_and_participants_never_the_actor(workspace: Catalog) -> None:
    al, ed, eve = (get_user(workspace, n) for n in ("al", "ed", "eve"))
    change_requests.add_comment(workspace, CR, "Is 130 right?", actor=al)
    assert [i.summary for i in _inbox_of(workspace, "ed")] == [
        "al commented on “Fix ages” on demo/people: Is 130 right?"
    ]
    assert _inbox_of(workspace, "al") == []

    change_requests.add_comment(workspace, CR, "Yes, checked.", actor=ed)  # al took part: al is told
    assert [i.event for i in _inbox_of(workspace, "al")] == ["commented"]
    change_requests.add_comment(workspace, CR, "+1", actor=eve)
    assert len(_inbox_of(workspace, "al")) == 2 and len(_inbox_of(workspace, "ed")) == 2

    change_requests.reject_change_request(workspace, CR, actor=al, reason="wrong source")
    for name in ("ed", "eve"):
        latest = _inbox_of(workspace, name)[0]
        assert (latest.event, latest.actor, latest.cr_id) == ("rejected", "al", CR)
        assert latest.summary == "al rejected “Fix ages” on demo/people: wrong source"
    assert [i.event for i in _inbox_of(workspace, "al")] == ["commented", "commented"]
    assert _inbox_of(workspace, "ada") == []  # an admin who never took part


def test_stale_is_told_to_the_author_once_per_conflicting_version(workspace: Catalog) -> None:
    assert notify.emit_stale(workspace, "demo", "people", CR, []) == 0
    assert notify.emit_stale(workspace, "demo", "people", CR, [2, 3]) == 1
    assert notify.emit_stale(workspace, "demo", "people", CR, [3]) == 0  # the review page asks again
    assert notify.emit_stale(workspace, "demo", "people", CR, [3, 5]) == 1
    assert [(i.event, i.summary) for i in _inbox_of(workspace, "ed")] == [
        ("stale", "“Fix ages” on demo/people conflicts with newer commits to main (version 5); "
         "open it to keep your value or take theirs for each conflict"),
        ("stale", "“Fix ages” on demo/people conflicts with newer commits to main (version 3); "
         "open it to keep your value or take theirs for each conflict"),
    ]
    assert _inbox_of(workspace, "al") == []


def test_inbox_counts_and_mark_read(workspace: Catalog) -> None:
    al = get_user(workspace, "al")
    _submitted(workspace)
    _submitted(workspace)
    notify.emit(workspace, "revised", project="demo", dataset="people", cr_id=CR, actor="ed", extra={"revision": 2})
    assert notify.unread_count(workspace, al) == 3
    assert notify.inbox(workspace, al)[0].summary == "ed revised “Fix ages” on demo/people (revision 2)"
    first = notify.inbox(workspace, al)[-1]
    assert notify.mark_read(workspace, al, [first.id]) == 1
    assert notify.unread_count(workspace, al) == 2
    assert [i.read for i in notify.inbox(workspace, al)] == [False, False, True]
    assert len(notify.inbox(workspace, al, unread_only=True)) == 2
    # Nobody marks another user's events read.
    assert notify.mark_read(workspace, get_user(workspace, "ada")) == 3
    assert notify.unread_count(workspace, al) == 2
    assert notify.mark_read(workspace, al) == 2 and notify.unread_count(workspace, al) == 0


# ---------------------------------------------------------------- failures, retries, dead endpoints


def test_a_failing_endpoint_is_retried_later_and_the_action_still_succeeds(
    workspace: Catalog, receiver: Receiver
) -> None:
    _hook(workspace, receiver.url)
    receiver.statuses = [500, 503]
    comment = change_requests.add_comment(workspace, CR, "please check row 7", actor=get_user(workspace, "al"))
    assert comment.body == "please check row 7"  # the action stands whatever the endpoint does

    now = utcnow()
    first = notify.drain(workspace, now=now)
    [failed] = first.failed
    assert (failed.attempts, failed.last_error) == (1, f"HTTP 500 from {receiver.url}")
    assert failed.next_attempt_at == now + timedelta(seconds=notify.backoff_s(1))
    assert notify.drain(workspace, now=now + timedelta(seconds=1)).failed == []  # not due yet

    second = notify.drain(workspace, now=now + timedelta(seconds=31))
    assert [(d.attempts, d.last_error) for d in second.failed] == [(2, f"HTTP 503 from {receiver.url}")]
    assert second.failed[0].next_attempt_at == now + timedelta(seconds=31 + notify.backoff_s(2))

    third = notify.drain(workspace, now=now + timedelta(seconds=31 + 60))
    assert [d.attempts for d in third.sent] == [3]
    bodies = [r.body for r in receiver.received]
    assert len(bodies) == 3 and len(set(bodies)) == 1  # the same bytes, so the same signature, every attempt
    assert json.loads(bodies[0])["comment"] == "please check row 7"
    [hook] = notify.list_webhooks(workspace, "demo", actor=get_user(workspace, "ada"))
    assert (hook.failing, hook.last_error, hook.pending) == (False, f"HTTP 503 from {receiver.url}", 0)
    assert hook.last_success_at is not None


def test_a_dead_endpoint_is_marked_failing_with_its_last_error(workspace: Catalog, capsys: Any) -> None:
    dead_url = f"http://127.0.0.1:{free_port()}/gone"  # nothing listens: connection refused
    hook = _hook(workspace, dead_url)
    _submitted(workspace)
    now = utcnow()
    for attempt in range(1, notify.MAX_ATTEMPTS + 1):
        report = notify.drain(workspace, now=now)
        if attempt < notify.MAX_ATTEMPTS:
            assert [d.attempts for d in report.failed] == [attempt] and report.dead == []
            now = report.failed[0].next_attempt_at or now
        else:
            assert report.failed == [] and [d.attempts for d in report.dead] == [notify.MAX_ATTEMPTS]
    assert notify.drain(workspace, now=now + timedelta(days=1)).failed == []  # dead: never tried again

    [failing] = notify.failing_webhooks(workspace, ["demo"])
    assert failing.id == hook.id and failing.last_error is not None and "ConnectError" in failing.last_error
    [dead] = notify.dead_deliveries(workspace, ["demo"])
    assert (dead.target, dead.event, dead.cr_id, dead.state) == (hook.id, "submitted", CR, "dead")
    assert notify.dead_deliveries(workspace, ["other"]) == []

    listed = run(capsys, "webhook", "list", "demo")
    assert listed.code == 0 and f"{hook.id}  FAILING  {dead_url}" in listed.out and "ConnectError" in listed.out
    doc = run(capsys, "--json", "webhook", "list", "demo").json()
    assert [(w["id"], w["failing"], w["dead"]) for w in doc["webhooks"]] == [(hook.id, True, 1)]
    assert SECRET not in listed.out and SECRET not in json.dumps(doc)


def test_a_failure_to_enqueue_is_logged_and_the_action_still_succeeds(
    workspace: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    with workspace.engine.begin() as connection:
        connection.execute(text("DROP TABLE notify_inbox"))
    with caplog.at_level(logging.WARNING, logger="core.notify"):
        comment = change_requests.add_comment(workspace, CR, "still saved", actor=get_user(workspace, "al"))
    assert comment.body == "still saved"
    assert [c.body for c in change_requests.comments(workspace, CR, actor=get_user(workspace, "ed"))] == ["still saved"]
    assert any("could not queue the commented notification" in r.getMessage() for r in caplog.records)
    assert _outbox(workspace) == []  # the whole enqueue rolled back, nothing half-written


def test_two_drainers_never_send_a_delivery_twice(workspace: Catalog, receiver: Receiver) -> None:
    _hook(workspace, receiver.url)
    for _ in range(12):
        _submitted(workspace)
    reports: list[notify.DrainReport] = []
    threads = [threading.Thread(target=lambda: reports.append(notify.drain(workspace))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(len(r.sent) for r in reports) == 12
    ids = [r.headers["x-oreo-delivery"] for r in receiver.received]
    assert len(ids) == 12 and len(set(ids)) == 12


def test_the_background_drainer_sends_without_being_asked(workspace: Catalog, receiver: Receiver) -> None:
    _hook(workspace, receiver.url)
    thread = background.start_background_drainer(workspace, interval=0.1)
    try:
        assert background.start_background_drainer(workspace, interval=0.1) is thread  # one per process
        _submitted(workspace)
        wait_for(lambda: receiver.received, timeout=30, what="the background drainer's POST")
    finally:
        background.stop_background_drainer()
    assert not thread.is_alive()
    assert receiver.received[0].json()["event"] == "submitted"


def test_a_wrong_smtp_password_is_a_failed_delivery(
    workspace: Catalog, smtp: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_SMTP_PASSWORD", "wrong")
    get_settings.cache_clear()
    _submitted(workspace)
    [failed] = notify.drain(workspace).failed
    assert failed.channel == "email" and "SMTPAuthenticationError" in (failed.last_error or "")
    assert smtp.messages == []


# ---------------------------------------------------------------- managing webhooks


def test_webhooks_are_managed_by_project_admins_only(workspace: Catalog) -> None:
    with pytest.raises(PermissionDenied, match="admin role"):
        notify.add_webhook(workspace, "demo", "https://hooks.example.test/x", SECRET, actor=get_user(workspace, "al"))
    with pytest.raises(NotFound, match="unknown project 'nope'"):
        notify.add_webhook(workspace, "nope", "https://hooks.example.test/x", SECRET, actor=get_user(workspace, "ada"))
    for url in ("ftp://example.test/x", "hooks.example.test/x", "http://", ""):
        with pytest.raises(InvalidInput, match="bad webhook URL"):
            notify.add_webhook(workspace, "demo", url, SECRET, actor=get_user(workspace, "ada"))
    with pytest.raises(InvalidInput, match="secret is empty"):
        notify.add_webhook(workspace, "demo", "https://hooks.example.test/x", "  ", actor=get_user(workspace, "ada"))
    with workspace.session() as s:
        assert s.scalars(select(WebhookRow)).all() == []


def test_a_short_secret_and_a_second_webhook_for_one_url_are_refused(workspace: Catalog) -> None:
    ada = get_user(workspace, "ada")
    with pytest.raises(InvalidInput, match="the webhook secret has 15 characters; use at least 16"):
        notify.add_webhook(workspace, "demo", "https://hooks.example.test/x", "x" * 15, actor=ada)
    hook = notify.add_webhook(workspace, "demo", "https://hooks.example.test/x", "x" * 16, actor=ada)
    with pytest.raises(AlreadyExists, match=f"already has a webhook for https://hooks.example.test/x \\({hook.id}\\)"):
        notify.add_webhook(workspace, "demo", " https://hooks.example.test/x ", SECRET, actor=ada)
    assert [h.id for h in notify.list_webhooks(workspace, "demo", actor=ada)] == [hook.id]


def test_removing_a_webhook_drops_its_pending_deliveries(workspace: Catalog) -> None:
    ada = get_user(workspace, "ada")
    hook = _hook(workspace, "https://hooks.example.test/x")
    _submitted(workspace)
    assert [r.channel for r in _outbox(workspace)] == ["webhook"]
    notify.remove_webhook(workspace, "demo", hook.id, actor=ada)
    assert _outbox(workspace) == [] and notify.list_webhooks(workspace, "demo", actor=ada) == []
    with pytest.raises(NotFound, match="has no webhook"):
        notify.remove_webhook(workspace, "demo", hook.id, actor=ada)


def test_cli_webhook_add_list_remove_and_drain(
    workspace: Catalog, receiver: Receiver, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    added = run(capsys, "webhook", "add", "demo", receiver.url, "--secret-stdin", "--as", "ada")
    assert added.code == 0 and added.err == ""
    hook_id = added.out.strip()
    with workspace.session() as s:
        row = s.get(WebhookRow, hook_id)
        assert row is not None and row.secret == SECRET  # kept as given: it signs every delivery

    listed = run(capsys, "--json", "webhook", "list", "demo")
    assert [w["id"] for w in listed.json()["webhooks"]] == [hook_id]

    _submitted(workspace)
    drained = run(capsys, "notify", "drain", "--json")
    assert drained.code == 0
    doc = drained.json()
    assert [(d["channel"], d["target"], d["event"]) for d in doc["sent"]] == [("webhook", hook_id, "submitted")]
    assert doc["failed"] == [] and doc["dead"] == []
    assert run(capsys, "notify", "drain").out.strip() == "nothing due"
    post = receiver.received[0]
    assert post.headers["x-oreo-signature"] == notify.sign(SECRET, post.body)

    removed = run(capsys, "webhook", "remove", "demo", hook_id)
    assert removed.code == 0 and hook_id in removed.out
    assert run(capsys, "--json", "webhook", "list", "demo").json()["webhooks"] == []


OK = SECRET + "\n"  # a long enough secret: each refusal below is about what it names


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["webhook", "add", "demo", "not a url", "--secret-stdin", "--as", "ada"], OK, "bad webhook URL"),
        (["webhook", "add", "nope", "https://h.example.test/", "--secret-stdin"], OK, "unknown project 'nope'"),
        (["webhook", "add", "demo", "https://h.example.test/", "--secret-stdin", "--as", "al"], OK, "admin role"),
        (["webhook", "add", "demo", "https://h.example.test/"], OK, "--secret-stdin"),
        (["webhook", "add", "demo", "https://h.example.test/", "--secret-stdin"], "", "secret is empty"),
        (["webhook", "list", "demo", "--as", "eve"], "", "admin role"),
        (["webhook", "remove", "demo", "wh_0000000000000000"], "", "has no webhook"),
    ],
)
def test_cli_webhook_errors_are_one_line_and_write_nothing(
    workspace: Catalog, capsys: Any, monkeypatch: pytest.MonkeyPatch, args: list[str], stdin: str, message: str
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert_one_error_line(run(capsys, *args), message)
    with workspace.session() as s:
        assert s.scalars(select(WebhookRow)).all() == [] and s.scalars(select(InboxRow)).all() == []


def test_a_delivery_whose_webhook_vanished_dies_at_once(workspace: Catalog) -> None:
    hook = _hook(workspace, "https://hooks.example.test/x")
    _submitted(workspace)
    with workspace.session() as s:  # as if removed while a drainer held the delivery
        s.delete(s.get(WebhookRow, hook.id))
    [dead] = notify.drain(workspace).dead
    assert (dead.attempts, dead.last_error) == (1, "the webhook was removed")


# ---------------------------------------------------------------- no internal targets, no slow-drip stalls

Answer = Callable[[socket.socket, threading.Event], None]


class Scripted:
    """A loopback TCP server that reads each HTTP request whole (unless ``reads=False``) and answers with a script."""

    def __init__(self, answer: Answer, *, reads: bool = True) -> None:
        self._answer, self._reads = answer, reads
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.requests: list[bytes] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if self._reads:
                self.requests.append(_read_request(conn))
            self._answer(conn, self.stop)

    def close(self) -> None:
        self.stop.set()
        self._listener.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = int(lengths[0]) if lengths else 0
    while len(body) < length:
        body += conn.recv(65536)
    return head


def answers(raw: bytes) -> Answer:
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(raw)

    return answer


def drips(head: bytes, tail: bytes = b"", *, every: float = 0.2, for_s: float = 60.0) -> Answer:
    """Send ``head``, a byte every ``every`` s for ``for_s`` s (or until the client hangs up), then ``tail``."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        until = time.monotonic() + for_s
        while time.monotonic() < until and not stop.wait(every):  # the drip's pace, not a wait for an outcome
            conn.sendall(b"x")
        conn.sendall(tail)

    return answer


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    servers: list[Scripted] = []

    def start(answer: Answer, *, reads: bool = True) -> Scripted:
        servers.append(Scripted(answer, reads=reads))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _allow(monkeypatch: pytest.MonkeyPatch, hosts: str) -> None:
    monkeypatch.setenv("OREO_WEBHOOK_ALLOWED_HOSTS", hosts)
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:6379/", r"^127\.0\.0\.1 is not a public address"),
        ("http://localhost/hook", r"^localhost resolves to (127\.0\.0\.1|::1), which is not a public address"),
        ("http://169.254.169.254/latest/meta-data/", r"^169\.254\.169\.254 is not a public address"),
        ("http://[::1]:8080/", r"^::1 is not a public address"),
        ("http://0x7f000001/", r"^0x7f000001 resolves to 127\.0\.0\.1, which is not a public address"),
        ("http://2130706433/", r"^2130706433 resolves to 127\.0\.0\.1, which is not a public address"),
        ("http://10.0.0.1/", r"^10\.0\.0\.1 is not a public address"),
        ("http://224.0.0.1/", r"^224\.0\.0\.1 is not a public address"),
        ("http://[::ffff:127.0.0.1]/", r"^::ffff:127\.0\.0\.1 is not a public address"),
        ("https://user:pass@example.com/", r"^bad webhook URL for host 'example\.com': it holds a user name or pass"),
        ("https://nowhere.invalid/hook", r"^webhook host 'nowhere\.invalid' does not resolve"),
        ("http://93.184.216.34:99999/", r"^bad webhook URL .*: port 99999 is not between 1 and 65535"),
        ("http://93.184.216.34:0/", r"^bad webhook URL .*: port 0 is not between 1 and 65535"),
        ("http://93.184.216.34/a b", r"^bad webhook URL .*: it holds a space"),
        ("http://93.184.216.34/" + "a" * 5000, r"^bad webhook URL: it has 5,021 characters, at most 2,048"),
    ],
)
def test_a_webhook_to_an_internal_address_is_refused_when_added(
    workspace: Catalog, monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    _allow(monkeypatch, "")
    with pytest.raises(InvalidInput, match=message) as refused:
        _hook(workspace, url)
    assert refused.value.field == "url" and "\n" not in str(refused.value) and "pass@" not in str(refused.value)
    if "public address" in message:
        assert "OREO_WEBHOOK_ALLOWED_HOSTS" in str(refused.value)  # says how to allow it
    with workspace.session() as s:
        assert s.scalars(select(WebhookRow)).all() == []


def test_a_listed_host_or_address_is_accepted_and_public_addresses_need_no_listing(
    workspace: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    _allow(monkeypatch, "")
    assert _hook(workspace, "https://8.8.8.8/hook").url == "https://8.8.8.8/hook"
    with pytest.raises(InvalidInput, match="not a public address"):
        _hook(workspace, "http://127.0.0.1:6379/")
    _allow(monkeypatch, " [::1], 127.0.0.1 ,Internal.Example.Test")
    assert _hook(workspace, "http://127.0.0.1:6379/").url == "http://127.0.0.1:6379/"
    assert _hook(workspace, "http://0x7f000001/").url == "http://0x7f000001/"  # the address it resolves to is listed
    assert _hook(workspace, "http://[::1]:8080/").url == "http://[::1]:8080/"
    assert _hook(workspace, "http://internal.example.test/hook").url == "http://internal.example.test/hook"  # by name
    with pytest.raises(InvalidInput, match=r"^10\.0\.0\.1 is not a public address"):
        _hook(workspace, "http://10.0.0.1/")


def test_a_host_no_longer_allowed_at_delivery_fails_without_being_sent(
    workspace: Catalog, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _hook(workspace, receiver.url)  # allowed now (loopback_allowed)
    _submitted(workspace)
    _allow(monkeypatch, "")
    report = notify.drain(workspace)
    assert [(d.target, d.attempts, d.last_error) for d in report.failed] == [
        (hook.id, 1, "refused: 127.0.0.1 is not a public address")
    ]
    assert receiver.received == []
    _allow(monkeypatch, "127.0.0.1")  # listed again: the retry goes through
    assert [d.target for d in notify.drain(workspace, now=utcnow() + timedelta(minutes=1)).sent] == [hook.id]
    assert len(receiver.received) == 1


def test_a_redirect_is_not_followed(
    workspace: Catalog, receiver: Receiver, scripted: Callable[..., Scripted]
) -> None:
    redirect = f"HTTP/1.1 302 Found\r\nLocation: {receiver.url}\r\nContent-Length: 0\r\n\r\n"
    redirecting = scripted(answers(redirect.encode()))
    _hook(workspace, redirecting.url)
    _submitted(workspace)
    [failed] = notify.drain(workspace).failed
    assert failed.last_error == f"HTTP 302 from {redirecting.url}: redirects are not followed"
    assert len(redirecting.requests) == 1 and receiver.received == []


def test_what_a_target_answers_is_never_repeated_to_users(
    workspace: Catalog, scripted: Callable[..., Scripted], capsys: Any
) -> None:
    marker = "MARKER-7f3a"
    garbled = scripted(answers(f"{marker} not http at all\r\n\r\n".encode()))
    erring = scripted(
        answers(f"HTTP/1.1 500 {marker}\r\nX-Why: {marker}\r\nContent-Length: 11\r\n\r\n{marker}".encode())
    )
    hooks = {_hook(workspace, garbled.url).id: garbled.url, _hook(workspace, erring.url).id: erring.url}
    _submitted(workspace)
    report = notify.drain(workspace)
    assert sorted(d.last_error or "" for d in report.failed) == sorted(
        ["the answer was not valid HTTP", f"HTTP 500 from {erring.url}"]
    )
    listed = run(capsys, "webhook", "list", "demo")
    doc = run(capsys, "--json", "webhook", "list", "demo").json()
    assert listed.code == 0 and {w["id"] for w in doc["webhooks"]} == set(hooks)
    assert all(w["last_error"] for w in doc["webhooks"])
    assert marker not in listed.out and marker not in json.dumps(doc)
    with workspace.session() as s:
        stored = [r.last_error for r in s.scalars(select(OutboxRow))]
        stored += [h.last_error for h in s.scalars(select(WebhookRow))]
    assert all(e and marker not in e for e in stored)


def test_a_slow_target_holds_its_delivery_at_most_the_deadline_and_not_the_others(
    workspace: Catalog, receiver: Receiver, scripted: Callable[..., Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_DELIVERY_DEADLINE_S", "2")
    get_settings.cache_clear()
    # A status line, then its headers a byte at a time: no read ever waits long, the answer never ends.
    dripping_head = scripted(drips(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"\r\nContent-Length: 0\r\n\r\n"))
    # A whole 200 answer, then its body a byte at a time: the status line is the answer, the body is not waited for.
    dripping_body = scripted(drips(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"))
    slow = _hook(workspace, dripping_head.url)
    answered = _hook(workspace, dripping_body.url)
    fast = _hook(workspace, receiver.url)
    _submitted(workspace)
    _submitted(workspace)

    report = notify.drain(workspace)
    assert [(d.target, d.last_error) for d in report.failed] == [(slow.id, "timed out after 2 s")]
    assert sorted(d.target for d in report.sent) == sorted([answered.id, answered.id, fast.id, fast.id])
    assert len(receiver.received) == 2 and len(dripping_head.requests) == 1
    # The slow target's second delivery was left for the next drain, untried, rather than held a deadline too.
    with workspace.session() as s:
        left = s.scalars(select(OutboxRow).where(OutboxRow.target == slow.id, OutboxRow.attempts == 0)).all()
    assert [(r.state, r.id > report.failed[0].id) for r in left] == [("pending", True)]


def test_a_slow_smtp_server_holds_an_email_at_most_the_deadline(
    workspace: Catalog, receiver: Receiver, scripted: Callable[..., Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    greeting = scripted(drips(b"220 ", b"\r\n"), reads=False)  # a greeting that never ends
    for name, value in {
        "OREO_SMTP_HOST": "127.0.0.1",
        "OREO_SMTP_PORT": str(greeting.port),
        "OREO_SMTP_TLS": "none",
        "OREO_DELIVERY_DEADLINE_S": "2",
    }.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    hook = _hook(workspace, receiver.url)
    _submitted(workspace)
    report = notify.drain(workspace)
    assert [(d.channel, d.target, d.last_error) for d in report.failed] == [
        ("email", "al@example.test", "timed out after 2 s")
    ]
    assert [d.target for d in report.sent] == [hook.id] and len(receiver.received) == 1


def test_an_email_whose_summary_has_line_breaks_is_sent_with_its_subject_folded(
    workspace: Catalog, smtp: Mailbox
) -> None:
    comment = "Row 7 is wrong.\nRow 9 too:\r\n\tsee the source."
    notify.emit(
        workspace, "commented", project="demo", dataset="people", cr_id=CR, actor="al", extra={"comment": comment}
    )
    report = notify.drain(workspace)
    assert ([d.target for d in report.sent], report.failed, report.dead) == (["ed@example.test"], [], [])
    [(envelope, message)] = smtp.messages
    assert envelope.rcpt_tos == ["ed@example.test"]
    assert message["Subject"] == (
        "[Oreo] al commented on “Fix ages” on demo/people: Row 7 is wrong. Row 9 too: see the source."
    )
    body = message.get_content().replace("\r\n", "\n")  # lines as sent, CRLF on the wire
    assert "Comment: Row 7 is wrong.\nRow 9 too:\n\tsee the source.\n" in body  # the text whole, line by line
    assert body.startswith("al commented on “Fix ages” on demo/people: Row 7 is wrong.\nRow 9 too:")


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_a_bad_delivery_deadline_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OREO_DELIVERY_DEADLINE_S", value)
    get_settings.cache_clear()
    with pytest.raises(InvalidInput, match="setting OREO_DELIVERY_DEADLINE_S must be"):
        get_settings()


# ---------------------------------------------------------------- email in each SMTP TLS mode
# A real aiosmtpd on loopback, with a private CA and a server certificate made here with ``cryptography``.


@dataclass(frozen=True)
class Certs:
    ca: Path  # what OREO_SMTP_CA_FILE points at
    cert: Path  # the server's certificate, signed by ``ca``, for 127.0.0.1
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A private CA and a server certificate it signed for 127.0.0.1 (made here with ``cryptography``)."""
    folder = tmp_path_factory.mktemp("smtp-tls")
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Oreo test CA"))
        .issuer_name(_name("Oreo test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = Certs(ca=folder / "ca.pem", cert=folder / "server.pem", key=folder / "server.key")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def _controller(mode: str, mailbox: Mailbox, certs: Certs, port: int) -> Controller:
    """aiosmtpd speaking ``mode``: plain, STARTTLS required before MAIL and AUTH, or TLS from the first byte."""
    common = {"hostname": "127.0.0.1", "port": port, "authenticator": _authenticate}
    if mode == "none":
        return Controller(mailbox, auth_require_tls=False, **common)
    if mode == "starttls":
        return Controller(mailbox, tls_context=certs.server_context(), require_starttls=True, **common)
    # aiosmtpd only counts STARTTLS as TLS for AUTH; this socket is TLS from its first byte.
    return Controller(mailbox, ssl_context=certs.server_context(), auth_require_tls=False, **common)


PointAt = Callable[[str, int, Path | None], None]


@pytest.fixture
def point_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[PointAt]:
    def configure(mode: str, port: int, ca: Path | None) -> None:
        env = {
            "OREO_SMTP_HOST": "127.0.0.1",
            "OREO_SMTP_PORT": str(port),
            "OREO_SMTP_TLS": mode,
            "OREO_SMTP_USER": "oreo",
            "OREO_SMTP_PASSWORD": "mail-pass",
            "OREO_SMTP_FROM": "oreo@example.test",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        if ca is None:
            monkeypatch.delenv("OREO_SMTP_CA_FILE", raising=False)
        else:
            monkeypatch.setenv("OREO_SMTP_CA_FILE", str(ca))
        get_settings.cache_clear()

    yield configure
    get_settings.cache_clear()


@pytest.mark.parametrize("mode", ["none", "starttls", "ssl"])
def test_each_tls_mode_delivers_with_login(
    mode: str,
    workspace: Catalog,
    certs: Certs,
    point_at: PointAt,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller(mode, mailbox, certs, port)
    controller.start()
    try:
        point_at(mode, port, certs.ca)
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    assert (len(report.sent), [f.last_error for f in report.failed], report.dead) == (1, [], [])
    [(envelope, message)] = mailbox.messages
    assert envelope.rcpt_tos == ["al@example.test"] and envelope.mail_from == "oreo@example.test"
    assert message["Subject"] == "[Oreo] ed submitted “Fix ages” on demo/people"


@pytest.mark.parametrize("mode", ["starttls", "ssl"])
def test_an_untrusted_certificate_is_a_failed_delivery_not_a_plain_fallback(
    mode: str,
    workspace: Catalog,
    certs: Certs,
    point_at: PointAt,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller(mode, mailbox, certs, port)
    controller.start()
    try:
        point_at(mode, port, None)  # the system's CAs do not know the test CA
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    [failed] = report.failed
    assert failed.channel == "email" and "CERTIFICATE_VERIFY_FAILED" in (failed.last_error or "")
    assert mailbox.messages == []


def test_starttls_against_a_server_without_it_fails_instead_of_sending_in_clear(
    workspace: Catalog,
    certs: Certs,
    point_at: PointAt,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller("none", mailbox, certs, port)
    controller.start()
    try:
        point_at("starttls", port, certs.ca)
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    [failed] = report.failed
    assert "SMTPNotSupportedError" in (failed.last_error or "") and mailbox.messages == []


def test_a_missing_ca_file_is_named_in_the_failure(
    workspace: Catalog,
    certs: Certs,
    point_at: PointAt,
    tmp_path: Path,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller("starttls", mailbox, certs, port)
    controller.start()
    try:
        point_at("starttls", port, tmp_path / "nope.pem")
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    [failed] = report.failed
    assert failed.last_error == f"the SMTP CA file {tmp_path / 'nope.pem'} does not exist (OREO_SMTP_CA_FILE)"
    assert mailbox.messages == []

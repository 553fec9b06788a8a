#!/usr/bin/env python3
"""A minimal client of the meshline example gateway, in Python 3 (standard library only).

Written from docs/gateway-protocol.md alone, not from the Rust client or the tests: the
frame (section 2), AUTH / RESUME / PING and the module-0 frames (section 4), the token
(section 5), refusal and kick codes (sections 6 and 7), numbered pushes and resume
(section 9). Use it as a library:

    from gateway_client import Client, mint_token
    c = Client("127.0.0.1", 7000)
    welcome = c.auth(mint_token("change-me", "alice"))
    print(c.request(1, 1))            # lobby: b"alice@be-1"
    c.request(3, 1, b"arena")         # join room "arena"
    print(c.next_push())              # the room's snapshots

or run it: `gateway_client.py --port 7000 --secret change-me --scenario` plays a
scenario against a gateway in front of the example game backend (auth, refusal, chat,
room, resume with replay, kick, ping) and exits 0 when every step saw what the document
says; each step prints `ok <step>`. examples/gateway/tests/suite/gateway_python.rs runs it.
"""

import argparse
import collections
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

# Section 2: the frame.
HEADER = struct.Struct(">IHHIB")  # length, module, opcode, sequence, flags
RELIABLE, REPLY, ERROR = 1, 2, 4

# Section 4: module 0.
GATEWAY = 0
AUTH, AUTH_OK, AUTH_FAIL, RESUME, KICK, PING, QUEUE, RECONNECT = 1, 2, 3, 4, 5, 6, 7, 8
REBOUND, MOVED, GAP = 9, 10, 11

# Section 12: the example game.
LOBBY, CHAT, ROOM, BIND, INVENTORY = 1, 2, 3, 4, 5


class Frame(collections.namedtuple("Frame", "module opcode seq flags payload")):
    """One frame (section 2)."""

    def encode(self):
        return HEADER.pack(9 + len(self.payload), self.module, self.opcode, self.seq,
                           self.flags) + self.payload

    def text(self):
        return self.payload.decode("utf-8", "replace")

    def coded(self):
        """`code text` of AUTH_FAIL and KICK (sections 6 and 7)."""
        code, _, text = self.text().partition(" ")
        return int(code), text


class Refused(Exception):
    """AUTH_FAIL: `code` and `text` (section 6)."""

    def __init__(self, code, text):
        super().__init__(f"refused {code}: {text}")
        self.code, self.text = code, text


class Kicked(Exception):
    """KICK: `code` and `text` (section 7)."""

    def __init__(self, code, text):
        super().__init__(f"kicked {code}: {text}")
        self.code, self.text = code, text


class ErrorReply(Exception):
    """A reply with the ERROR flag."""


def mint_token(secret, account, ttl=3600, now=None, nonce=None):
    """A token (section 5): account.expiry.nonce.signature."""
    expiry = int(now if now is not None else time.time()) + ttl
    nonce = nonce or os.urandom(16).hex()
    signed = f"{account}\n{expiry}\n{nonce}".encode()
    signature = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"{account}.{expiry}.{nonce}.{signature}"


class Client:
    """One connection to a gateway over TCP (section 1)."""

    def __init__(self, host, port, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.next_seq = 1
        self.pushes = collections.deque()
        self.last_push = 0  # section 9: the last numbered push received
        self.welcome = None
        self.kick = None

    # -- frames ------------------------------------------------------------------------
    def send(self, module, opcode, seq, payload=b"", flags=0):
        self.sock.sendall(Frame(module, opcode, seq, flags, payload).encode())

    def read(self, timeout=None):
        """The next frame; None when the gateway closed the connection."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                (length,) = struct.unpack(">I", self.buf[:4])
                if length < 9:
                    raise ValueError(f"not a frame: length {length}")
                if len(self.buf) >= 4 + length:
                    _, module, opcode, seq, flags = HEADER.unpack(self.buf[:13])
                    payload, self.buf = self.buf[13:4 + length], self.buf[4 + length:]
                    f = Frame(module, opcode, seq, flags, payload)
                    self._seen(f)
                    return f
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def _seen(self, f):
        if f.module == GATEWAY and f.opcode == KICK:
            self.kick = f.coded()
        elif f.module == GATEWAY and f.opcode == PING and not f.flags & REPLY:
            # Section 4: a PING from the gateway is answered with its sequence.
            self.send(GATEWAY, PING, f.seq, b"", REPLY)
        # Section 9: numbered pushes are reliable, not replies, sequence > 0 (MOVED
        # included; REBOUND carries a request's sequence or 0, never a push number).
        if (f.flags & RELIABLE and not f.flags & REPLY and f.seq > 0
                and not (f.module == GATEWAY and f.opcode == REBOUND)):
            self.last_push = f.seq

    # -- admission (sections 3 and 4) -----------------------------------------------------
    def _admit(self, opcode, payload):
        self.send(GATEWAY, opcode, 0, payload)
        while True:
            f = self.read()
            if f is None:
                raise ConnectionError("closed before AUTH_OK")
            if f.module == GATEWAY and f.opcode == QUEUE:
                continue  # position eta_ms: keep waiting
            if f.module == GATEWAY and f.opcode == AUTH_FAIL:
                raise Refused(*f.coded())
            if f.module == GATEWAY and f.opcode == AUTH_OK:
                session, secret, gateway = f.text().split(" ")
                self.welcome = {"session": session, "secret": secret, "gateway": gateway,
                                "resumed": f.seq == 1}
                return self.welcome
            raise ValueError(f"unexpected first answer {f}")

    def auth(self, token):
        return self._admit(AUTH, token.encode())

    def resume(self, session, secret, last_push=0):
        self.last_push = last_push
        return self._admit(RESUME, f"{session} {secret} {last_push}".encode())

    # -- requests and pushes (sections 8 and 9) --------------------------------------------
    def request(self, module, opcode, payload=b"", timeout=5.0):
        """Sends a request, returns its reply's payload; pushes meanwhile are kept."""
        seq = self.next_seq
        self.next_seq += 1
        self.send(module, opcode, seq, payload, RELIABLE)
        deadline = time.monotonic() + timeout
        while True:
            f = self.read(max(0.01, deadline - time.monotonic()))
            if f is None:
                raise Kicked(*self.kick) if self.kick else ConnectionError("closed")
            if f.flags & REPLY and f.module == module and f.seq == seq:
                if f.flags & ERROR:
                    raise ErrorReply(f.text())
                return f.payload
            self.pushes.append(f)

    def ping(self, seq):
        self.send(GATEWAY, PING, seq)
        while True:
            f = self.read()
            if f is None:
                raise ConnectionError("closed")
            if f.module == GATEWAY and f.opcode == PING and f.flags & REPLY:
                return f
            self.pushes.append(f)

    def next_push(self, timeout=3.0):
        """The next frame that is not a reply (a push or a module-0 notice), or None."""
        if self.pushes:
            return self.pushes.popleft()
        try:
            return self.read(timeout)
        except socket.timeout:
            return None

    def push_of(self, module, opcode, timeout=3.0):
        """The next push of `module`/`opcode`, skipping others; None if none comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            f = self.next_push(max(0.01, deadline - time.monotonic()))
            if f is None:
                return None
            if f.module == module and f.opcode == opcode:
                return f
        return None

    def close(self):
        self.sock.close()


# -- the scenario ---------------------------------------------------------------------------
def check(cond, what):
    if not cond:
        raise AssertionError(what)


def scenario(host, port, secret, duplicate_login="kick-old"):
    # Under refuse-new an account whose session lives (an earlier run's, detached
    # within the resume window) cannot log in again: each run has accounts and a room
    # of its own. Under kick-old the names stay, and each login ends the account's
    # session from the run before, room membership included (section 9).
    refuse_new = duplicate_login == "refuse-new"
    tag = f"-{os.urandom(4).hex()}" if refuse_new else ""
    room_name = f"py-room{tag}".encode()

    def login(account):
        c = Client(host, port)
        c.auth(mint_token(secret, account + tag))
        return c

    # Refusal: a token signed with another secret (section 6, code 2).
    c = Client(host, port)
    try:
        c.auth(mint_token("not-the-secret", "mallory"))
        raise AssertionError("a forged token was admitted")
    except Refused as e:
        check(e.code == 2 and e.text == "forged token (bad signature)", e)
    print("ok refusal", flush=True)

    # Auth (sections 3 and 5) and a lobby request.
    alice, bob = login("alice"), login("bob")
    check(len(alice.welcome["session"]) == 32 and not alice.welcome["resumed"], alice.welcome)
    who = alice.request(LOBBY, 1).decode()
    check(who.startswith(f"alice{tag}@"), who)
    print(f"ok auth {who}", flush=True)

    # Chat: a reliable push to everyone, numbered 1 for each session.
    check(alice.request(CHAT, 1, b"hello") == b"sent", "chat answer")
    for c in (alice, bob):
        f = c.push_of(CHAT, 2)
        check(f is not None and f.text() == f"alice{tag}: hello", f)
        check(f.flags & RELIABLE and f.seq == 1, f)
    print("ok chat", flush=True)

    # Room (keyed): both members on one backend, one copy of its snapshots.
    joined = [c.request(ROOM, 1, room_name).decode() for c in (alice, bob)]
    homes = {j.rsplit(" ", 1)[1] for j in joined}
    name = room_name.decode()
    check(len(homes) == 1 and joined[0].startswith(f"joined {name} on "), joined)
    state = alice.request(ROOM, 2, room_name).decode()
    check(state.startswith(f"{name} ") and state.endswith(f"2 members on {homes.pop()}"), state)
    for c in (alice, bob):
        seen = []
        while len(seen) < 3:
            f = c.push_of(ROOM, 9)
            check(f is not None, "room snapshots")
            check(f.seq == 0 and not f.flags & RELIABLE, f)  # unreliable: not numbered
            room, word, n = f.text().split(" ")
            check(room == name and word == "snapshot", f)
            seen.append(int(n))
        check(seen == sorted(set(seen)), f"one copy, in order: {seen}")
    print("ok room", flush=True)

    # Resume (section 9): alice drops; bob chats twice; alice resumes with the last
    # number she got and receives exactly the two she missed, in order.
    session, resume_secret, last = (alice.welcome["session"], alice.welcome["secret"],
                                    alice.last_push)
    check(last == 1, f"last push {last}")
    alice.close()
    for text in (b"one", b"two"):
        check(bob.request(CHAT, 1, text) == b"sent", "chat")
    alice = Client(host, port)
    w = alice.resume(session, resume_secret, last)
    check(w["session"] == session and w["resumed"], w)
    replay = []
    while len(replay) < 2:
        f = alice.push_of(CHAT, 2)
        check(f is not None, f"replayed chats: {replay}")
        replay.append((f.seq, f.text()))
    check(replay == [(2, f"bob{tag}: one"), (3, f"bob{tag}: two")], replay)
    check(alice.request(LOBBY, 1).decode().startswith(f"alice{tag}@"), "served after resume")
    print("ok resume", flush=True)

    # Ping (section 4).
    pong = alice.ping(77)
    check(pong.seq == 77 and pong.flags & REPLY, pong)
    print("ok ping", flush=True)

    if refuse_new:
        # Section 6: a second login of a live session's account is refused with
        # ALREADY_ONLINE (13); the session and its connection go on.
        try:
            login("alice")
            raise AssertionError("a second login was admitted under refuse-new")
        except Refused as e:
            check(e.code == 13, e)
        check(alice.ping(78).seq == 78, "the first session goes on")
        print("ok kick (refused: already online)", flush=True)
        return

    # Kick (section 7): alice logs in again elsewhere; the old connection gets KICK 4
    # as its last frame, and its session has ended.
    again = login("alice")
    while True:
        f = alice.next_push(5.0)
        if f is None:
            break
    check(alice.kick is not None and alice.kick[0] == 4, f"kick {alice.kick}")
    try:
        Client(host, port).resume(session, resume_secret, alice.last_push)
        raise AssertionError("an ended session was resumed")
    except Refused as e:
        check(e.code == 8, e)
    check(again.request(LOBBY, 1).decode().startswith(f"alice{tag}@"), "the new session works")
    print("ok kick", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--scenario", action="store_true", help="play the scenario and check it")
    p.add_argument("--duplicate-login", default="kick-old", choices=["kick-old", "refuse-new"],
                   help="the gateway's duplicate-login policy the scenario expects")
    args = p.parse_args()
    if not args.scenario:
        c = Client(args.host, args.port)
        print(c.auth(mint_token(args.secret, "python")))
        print(c.request(LOBBY, 1).decode())
        return 0
    try:
        scenario(args.host, args.port, args.secret, args.duplicate_login)
    except Exception as e:  # noqa: BLE001 - any failure is the scenario's verdict
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        return 1
    print("ok all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

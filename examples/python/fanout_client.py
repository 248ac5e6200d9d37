#!/usr/bin/python3
"""A fanout client in Python: submit to one sidecar, watch the events arrive on another.

Run it with Debian's /usr/bin/python3 and its packages python3-grpcio and
python3-grpc-tools (`bash test/deps.sh` installs them), against two sidecars of one
cluster (see examples/README.md):

    /usr/bin/python3 examples/python/fanout_client.py \\
        --submit-addr 127.0.0.1:7070 --watch-addr 127.0.0.1:7080

What it does, in order, checking each step:
  1. compiles proto/fanout/v1/fanout.proto with grpc_tools.protoc into a temporary
     directory and imports the stubs (nothing generated is committed);
  2. GetStatus on both sidecars: they must be two different nodes;
  3. Subscribe on the watch node with snapshot=True under a prefix of its own, and
     reads up to the snapshot_complete marker;
  4. Submit of a few events to the submit node with ack=ACK_POLICY_ALL: every event
     must be ACCEPTED, every peer ACKED and the policy satisfied;
  5. reads the watch stream until every event arrived, at the version Submit returned,
     from the submit node;
  6. Get on the watch node: every key at that version;
  7. Submit with an empty task_id must fail with INVALID_ARGUMENT.

Every call has a deadline; UNAVAILABLE is retried with exponential backoff for
--retry-for seconds. Exit status 0 means every check passed; 1 means one failed (the
reason is on stderr, starting with "FAIL:"); 2 is a usage error.
"""

import argparse
import atexit
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid

try:
    import grpc
    from google.protobuf import duration_pb2
    from grpc_tools import protoc
except ImportError as err:
    sys.exit(
        f"FAIL: {err}: this example needs Debian's python3-grpcio and python3-grpc-tools "
        "for /usr/bin/python3 (run: bash test/deps.sh, or apt-get install python3-grpcio "
        "python3-grpc-tools)"
    )

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Faster reconnects than gRPC's default (1 s, growing to 120 s): a sidecar that is
# still starting is reached within a fraction of a second of listening. Not
# grpc.min_reconnect_backoff_ms: gRPC's C core also takes it as the time one
# connection attempt may last (default 20 s), and at 100 ms a loaded machine (the
# sidecar's or this one) timed out every attempt "before receiving SETTINGS frame".
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class CheckFailed(Exception):
    """A step ran but did not do what the example expects of the cluster."""


class CallFailed(Exception):
    """A call ended with a gRPC status other than OK: what was called, code, details."""

    def __init__(self, what, err, hint=""):
        self.code, self.details = err.code(), err.details()
        super().__init__(f"{what}: {self.code.name}: {self.details}{hint}")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Submit events to one fanout sidecar and watch them arrive on another.",
        epilog="Defaults are nodes a and b of the README's walk-through; `make demo` prints "
        "its nodes' app addresses.",
    )
    env = os.environ.get
    p.add_argument("--submit-addr", default=env("FANOUT_SUBMIT_ADDR", "127.0.0.1:7070"),
                   help="app address of the sidecar to submit to (env FANOUT_SUBMIT_ADDR)")
    p.add_argument("--watch-addr", default=env("FANOUT_WATCH_ADDR", "127.0.0.1:7080"),
                   help="app address of another sidecar of the cluster, to watch (env FANOUT_WATCH_ADDR)")
    p.add_argument("--prefix", default=f"example/python/{uuid.uuid4().hex[:8]}/",
                   help="task_id prefix of the events (default: a new one per run)")
    p.add_argument("--events", type=int, default=3, help="how many events to submit")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="deadline of each call, in seconds (Submit gets --ack-timeout on top)")
    p.add_argument("--ack-timeout", type=float, default=3.0,
                   help="SubmitRequest.ack_timeout: how long Submit waits for the peers' acks")
    p.add_argument("--watch-timeout", type=float, default=10.0,
                   help="how long the watch may take to see every submitted event")
    p.add_argument("--retry-for", type=float, default=5.0,
                   help="how long to retry a call answered UNAVAILABLE")
    p.add_argument("--proto-dir", default=os.path.join(REPO, "proto"),
                   help="root of the .proto files (default: the repository's proto/)")
    p.add_argument("--summary", metavar="FILE",
                   help="write what was submitted (task_id, version, payload) to FILE as JSON")
    args = p.parse_args(argv)
    if args.events < 1 or min(args.timeout, args.ack_timeout, args.watch_timeout) <= 0 or args.retry_for < 0:
        p.error("--events and the timeouts must be positive, --retry-for not negative")
    return args


def load_stubs(proto_dir):
    """Compiles fanout/v1/fanout.proto into a temporary directory and imports it.

    grpc_tools bundles protoc and the well-known types (google/protobuf/*.proto), so
    this needs no other tool. It takes well under a second.
    """
    out = tempfile.mkdtemp(prefix="fanout-py-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main([
        "grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}",
        f"--python_out={out}", f"--grpc_python_out={out}", "fanout/v1/fanout.proto",
    ])
    if rc != 0:
        raise CheckFailed(f"grpc_tools.protoc failed on {proto_dir}/fanout/v1/fanout.proto (exit {rc})")
    sys.path.insert(0, out)
    from fanout.v1 import fanout_pb2, fanout_pb2_grpc  # noqa: E402 (generated just now)
    return fanout_pb2, fanout_pb2_grpc


def retry_unavailable(what, call, retry_for):
    """Runs call(); while it fails with UNAVAILABLE, waits and tries again.

    Any other gRPC error, and UNAVAILABLE past retry_for, raises CallFailed.

    UNAVAILABLE means the sidecar is not reachable (not started, restarting) or is
    draining: nothing was applied, so trying again is safe. Any other status is final.
    The pause doubles from 50 ms up to 1 s, with jitter, for at most retry_for seconds.
    """
    give_up = time.monotonic() + retry_for
    pause, attempt = 0.05, 1
    while True:
        try:
            return call()
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise CallFailed(what, err) from err
            if time.monotonic() + pause > give_up:
                raise CallFailed(what, err, f" (gave up after {attempt} attempts in "
                                 f"{retry_for:g}s: is a sidecar running there?)") from err
            print(f"  {what}: UNAVAILABLE ({err.details()}); retry {attempt} in {pause:.2f}s",
                  file=sys.stderr)
            time.sleep(pause * random.uniform(0.8, 1.2))
            pause, attempt = min(pause * 2, 1.0), attempt + 1


def duration(seconds):
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def entries(resp):
    """The entries of one SubscribeResponse: its batch, or the single entry it carries."""
    if resp.batch:
        return list(resp.batch)
    if resp.HasField("event"):
        return [resp]
    return []


class Client:
    """One sidecar's app listener: a channel, a stub and the call settings."""

    def __init__(self, name, addr, pb, pb_grpc, args):
        self.name, self.addr, self.pb, self.args = name, addr, pb, args
        self.channel = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.FanoutServiceStub(self.channel)
        self.node_id = None

    def close(self):
        self.channel.close()

    def call(self, method, request, timeout=None):
        """A unary call with a deadline, retried while UNAVAILABLE."""
        rpc = getattr(self.stub, method)
        return retry_unavailable(f"{method} on {self.addr}",
                                 lambda: rpc(request, timeout=timeout or self.args.timeout),
                                 self.args.retry_for)


def step_nodes(submit, watch):
    for c in (submit, watch):
        c.node_id = c.call("GetStatus", c.pb.GetStatusRequest()).node_id
        print(f"{c.name} node: {c.node_id} at {c.addr}")
    if submit.node_id == watch.node_id:
        raise CheckFailed(f"--submit-addr and --watch-addr are the same node ({submit.node_id}): "
                          "give the app addresses of two sidecars of one cluster")


def step_subscribe(watch, prefix):
    """Opens the watch and reads its snapshot. Returns the open stream."""
    pb, args = watch.pb, watch.args
    request = pb.SubscribeRequest(task_id_prefix=prefix, snapshot=True)
    # The stream's deadline covers the whole watch: snapshot, Submit, arrival.
    budget = args.timeout + args.ack_timeout + args.watch_timeout

    def open_and_read_snapshot():
        stream = watch.stub.Subscribe(request, timeout=budget)
        n = 0
        for resp in stream:
            if resp.snapshot_complete:
                return stream, n
            n += len(entries(resp))
        raise CheckFailed(f"Subscribe on {watch.addr} ended before snapshot_complete")

    stream, n = retry_unavailable(f"Subscribe on {watch.addr}", open_and_read_snapshot, args.retry_for)
    print(f"watch {watch.node_id}: subscribed to {prefix!r} (snapshot: {n} entries)")
    return stream


def step_submit(submit, prefix):
    pb, args = submit.pb, submit.args
    events = [
        pb.Event(task_id=f"{prefix}i-{i}",
                 payload=json.dumps({"status": "UP", "n": i}).encode(),
                 attributes={"lang": "python"})
        for i in range(args.events)
    ]
    request = pb.SubmitRequest(events=events, ack=pb.ACK_POLICY_ALL,
                               ack_timeout=duration(args.ack_timeout))
    # The deadline must outlast ack_timeout: the sidecar stops waiting at whichever
    # comes first, and a deadline that fires first loses the answer.
    resp = submit.call("Submit", request, timeout=args.ack_timeout + args.timeout)
    print(f"submit {submit.node_id}: {len(events)} events, ack ALL within {args.ack_timeout:g}s")
    if len(resp.versions) != len(events) or len(resp.results) != len(events):
        raise CheckFailed(f"Submit answered {len(resp.versions)} versions and {len(resp.results)} "
                          f"results for {len(events)} events")
    for ev, version, res in zip(events, resp.versions, resp.results):
        outcome = pb.EventOutcome.Name(res.outcome)
        print(f"  {ev.task_id}  {outcome}  version {version}  revision {res.revision}")
        if res.outcome != pb.EVENT_OUTCOME_ACCEPTED:
            raise CheckFailed(f"{ev.task_id}: {outcome} {res.detail}".strip())
    for ack in resp.peer_acks:
        detail = f" ({ack.detail})" if ack.detail else ""
        print(f"  peer {ack.peer}: {pb.PeerAckState.Name(ack.state)}{detail}")
    if not resp.satisfied:
        raise CheckFailed("ACK_POLICY_ALL not satisfied: " + ", ".join(
            f"{a.peer} {pb.PeerAckState.Name(a.state)}" for a in resp.peer_acks))
    not_acked = [a.peer for a in resp.peer_acks if a.state != pb.PEER_ACK_STATE_ACKED]
    if not resp.peer_acks or not_acked:
        raise CheckFailed(f"satisfied, yet peers not ACKED: {not_acked or 'no peer listed'}")
    print(f"  satisfied: every one of {len(resp.peer_acks)} peers acknowledged every event")
    return {ev.task_id: (version, ev.payload) for ev, version in zip(events, resp.versions)}


def step_watch(watch, stream, origin, want):
    """Reads the stream until every event of want arrived, at its version, from origin."""
    started, missing = time.monotonic(), dict(want)
    try:
        for resp in stream:
            for e in entries(resp):
                task_id = e.event.task_id
                if task_id not in missing:
                    continue
                version, payload = missing.pop(task_id)
                print(f"watch {watch.node_id}: {task_id} version {e.event.version} from "
                      f"{e.origin_node}, revision {e.revision} (+{time.monotonic() - started:.3f}s)")
                if (e.event.version, e.origin_node, e.event.payload) != (version, origin, payload):
                    raise CheckFailed(f"watch saw {task_id} as version {e.event.version} from "
                                      f"{e.origin_node}, want version {version} from {origin}")
            if not missing:
                return
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise CallFailed(f"Subscribe on {watch.addr}", err) from err
        raise CheckFailed(f"watch on {watch.addr}: deadline passed; never saw {sorted(missing)}") from err
    finally:
        stream.cancel()
    raise CheckFailed(f"watch on {watch.addr} ended; never saw {sorted(missing)}")


def step_get(watch, origin, want):
    pb = watch.pb
    resp = watch.call("Get", pb.GetRequest(task_ids=list(want)))
    got = {e.event.task_id: e for e in resp.entries}
    print(f"get {watch.node_id}: {len(got)} of {len(want)} keys (table revision {resp.revision})")
    for task_id, (version, payload) in want.items():
        e = got.get(task_id)
        if e is None:
            raise CheckFailed(f"Get on {watch.addr}: {task_id} missing")
        print(f"  {task_id}  version {e.event.version}  origin {e.origin_node}  "
              f"payload {e.event.payload.decode()}")
        if (e.event.version, e.origin_node, e.event.payload) != (version, origin, payload):
            raise CheckFailed(f"Get on {watch.addr}: {task_id} is version {e.event.version} from "
                              f"{e.origin_node}, want {version} from {origin}")


def step_invalid(submit):
    """A bad request is refused as a whole with INVALID_ARGUMENT naming the field."""
    pb = submit.pb
    try:
        submit.call("Submit", pb.SubmitRequest(events=[pb.Event(task_id="")]))
    except CallFailed as err:
        if err.code != grpc.StatusCode.INVALID_ARGUMENT or "task_id" not in err.details:
            raise CheckFailed(f"empty task_id: got {err}, want INVALID_ARGUMENT naming task_id") from err
        print(f"invalid: Submit with an empty task_id -> {err.code.name}: {err.details} (as expected)")
        return
    raise CheckFailed("Submit with an empty task_id was accepted, want INVALID_ARGUMENT")


def run(args):
    pb, pb_grpc = load_stubs(args.proto_dir)
    print(f"fanout Python client: submit to {args.submit_addr}, watch {args.watch_addr}, "
          f"prefix {args.prefix!r}")
    submit = Client("submit", args.submit_addr, pb, pb_grpc, args)
    watch = Client("watch", args.watch_addr, pb, pb_grpc, args)
    try:
        step_nodes(submit, watch)
        stream = step_subscribe(watch, args.prefix)
        want = step_submit(submit, args.prefix)
        step_watch(watch, stream, submit.node_id, want)
        step_get(watch, submit.node_id, want)
        step_invalid(submit)
    finally:
        submit.close()
        watch.close()
    if args.summary:
        write_summary(args.summary, submit, watch, want)
    print(f"OK: {len(want)} events submitted to {submit.node_id} with ACK_POLICY_ALL, "
          f"acknowledged by every peer, seen on {watch.node_id}'s watch and read back by Get")


def write_summary(path, submit, watch, want):
    events = [{"task_id": t, "version": str(v), "payload": p.decode()} for t, (v, p) in want.items()]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"submit_node": submit.node_id, "watch_node": watch.node_id, "events": events}, f, indent=2)


def main(argv):
    args = parse_args(argv)
    try:
        run(args)
    except (CheckFailed, CallFailed) as err:
        print(f"FAIL: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

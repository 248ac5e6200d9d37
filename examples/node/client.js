#!/usr/bin/env node
// A fanout client in Node.js: submit to one sidecar, watch the events arrive on another.
//
// Run it against two sidecars of one cluster (see examples/README.md), after
// `npm ci` in this directory (or `bash test/deps.sh` from the repository root):
//
//   node examples/node/client.js --submit-addr 127.0.0.1:7070 --watch-addr 127.0.0.1:7080
//
// What it does, in order, checking each step:
//   1. loads proto/fanout/v1/fanout.proto at run time with @grpc/proto-loader, with
//      `longs: String`: uint64 versions and revisions are above 2^53, so as JavaScript
//      numbers they would be rounded; as strings they stay exact;
//   2. GetStatus on both sidecars: they must be two different nodes;
//   3. Subscribe on the watch node with snapshot: true under a prefix of its own, and
//      reads up to the snapshot_complete marker;
//   4. Submit of a few events to the submit node with ack ACK_POLICY_ALL: every event
//      must be ACCEPTED, every peer ACKED and the policy satisfied;
//   5. reads the watch stream until every event arrived, at the version Submit
//      returned, from the submit node;
//   6. Get on the watch node: every key at exactly that version (compared as strings);
//   7. Submit with an empty task_id must fail with INVALID_ARGUMENT.
//
// Every call has a deadline; UNAVAILABLE is retried with exponential backoff for
// --retry-for seconds. Exit status 0 means every check passed; 1 means one failed (the
// reason is on stderr, starting with "FAIL:"); 2 is a usage error.

import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));

// Imported dynamically so that missing packages get a message saying what to run.
let grpc, protoLoader;
try {
  grpc = (await import('@grpc/grpc-js')).default;
  protoLoader = (await import('@grpc/proto-loader')).default;
} catch (err) {
  console.error(`FAIL: ${err.message}\n  run \`npm ci\` in ${here} (or: bash test/deps.sh)`);
  process.exit(1);
}
const { status: Status } = grpc;

// Faster reconnects than gRPC's default (1 s, growing to 120 s): a sidecar that is
// still starting is reached within a fraction of a second of listening.
const channelOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
};

/** A step ran but did not do what the example expects of the cluster. */
class CheckFailed extends Error {}

/** A call ended with a gRPC status other than OK: what was called, code, details. */
class CallFailed extends Error {
  constructor(what, err, hint = '') {
    super(`${what}: ${statusName(err.code)}: ${err.details}${hint}`);
    this.code = err.code;
    this.details = err.details;
  }
}

const statusName = (code) => Object.keys(Status).find((k) => Status[k] === code) ?? `code ${code}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const deadline = (seconds) => new Date(Date.now() + seconds * 1000);

function parseFlags(argv) {
  const env = process.env;
  const usage = `usage: node client.js [--submit-addr A] [--watch-addr B] [--prefix P] [--events N]
  [--timeout S] [--ack-timeout S] [--watch-timeout S] [--retry-for S] [--proto-dir DIR] [--summary FILE]
Defaults: FANOUT_SUBMIT_ADDR or 127.0.0.1:7070, FANOUT_WATCH_ADDR or 127.0.0.1:7080 (nodes a and b
of the README's walk-through; \`make demo\` prints its nodes' app addresses).`;
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        'submit-addr': { type: 'string', default: env.FANOUT_SUBMIT_ADDR ?? '127.0.0.1:7070' },
        'watch-addr': { type: 'string', default: env.FANOUT_WATCH_ADDR ?? '127.0.0.1:7080' },
        prefix: { type: 'string', default: `example/node/${randomBytes(4).toString('hex')}/` },
        events: { type: 'string', default: '3' },
        timeout: { type: 'string', default: '5' }, // seconds, each call (Submit: plus ack-timeout)
        'ack-timeout': { type: 'string', default: '3' },
        'watch-timeout': { type: 'string', default: '10' },
        'retry-for': { type: 'string', default: '5' },
        'proto-dir': { type: 'string', default: resolve(here, '..', '..', 'proto') },
        summary: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    console.error(`${err.message}\n${usage}`);
    process.exit(2);
  }
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  const flags = {
    submitAddr: values['submit-addr'],
    watchAddr: values['watch-addr'],
    prefix: values.prefix,
    events: Number(values.events),
    timeout: Number(values.timeout),
    ackTimeout: Number(values['ack-timeout']),
    watchTimeout: Number(values['watch-timeout']),
    retryFor: Number(values['retry-for']),
    protoDir: values['proto-dir'],
    summary: values.summary,
  };
  const positive = [flags.events, flags.timeout, flags.ackTimeout, flags.watchTimeout];
  if (!Number.isInteger(flags.events) || positive.some((v) => !(v > 0)) || !(flags.retryFor >= 0)) {
    console.error(`--events and the timeouts must be positive numbers, --retry-for not negative\n${usage}`);
    process.exit(2);
  }
  return flags;
}

function loadFanout(protoDir) {
  const def = protoLoader.loadSync('fanout/v1/fanout.proto', {
    includeDirs: [protoDir],
    keepCase: true, // task_id, not taskId: the field names of the proto
    longs: String, // uint64 as decimal strings: exact beyond Number.MAX_SAFE_INTEGER
    enums: String, // enum values by name, e.g. 'PEER_ACK_STATE_ACKED'
    defaults: true, // unset scalar fields read as their zero value (satisfied: false)
  });
  return grpc.loadPackageDefinition(def).fanout.v1;
}

// retryUnavailable runs call(); while it fails with UNAVAILABLE, waits and tries again.
// UNAVAILABLE means the sidecar is not reachable (not started, restarting) or is
// draining: nothing was applied, so trying again is safe. Any other status, and
// UNAVAILABLE past retryFor seconds, throws CallFailed. The pause doubles from 50 ms up
// to 1 s, with jitter.
async function retryUnavailable(what, call, retryFor) {
  const giveUp = Date.now() + retryFor * 1000;
  let pause = 50;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      if (err instanceof CheckFailed || err.code === undefined) throw err;
      if (err.code !== Status.UNAVAILABLE) throw new CallFailed(what, err);
      if (Date.now() + pause > giveUp) {
        throw new CallFailed(what, err, ` (gave up after ${attempt} attempts in ${retryFor}s: is a sidecar running there?)`);
      }
      console.error(`  ${what}: UNAVAILABLE (${err.details}); retry ${attempt} in ${(pause / 1000).toFixed(2)}s`);
      await sleep(pause * (0.8 + 0.4 * Math.random()));
      pause = Math.min(pause * 2, 1000);
    }
  }
}

/** The entries of one SubscribeResponse: its batch, or the single entry it carries. */
const entries = (resp) => (resp.batch.length > 0 ? resp.batch : resp.event ? [resp] : []);

/** One sidecar's app listener: a client and the call settings. */
class Sidecar {
  constructor(name, addr, fanout, flags) {
    this.name = name;
    this.addr = addr;
    this.flags = flags;
    try {
      this.client = new fanout.FanoutService(addr, grpc.credentials.createInsecure(), channelOptions);
    } catch (err) {
      throw new CheckFailed(`--${name}-addr ${JSON.stringify(addr)}: ${err.message} (want host:port or unix:///path)`);
    }
    this.nodeId = undefined;
  }

  close() {
    this.client.close();
  }

  /** A unary call with a deadline, retried while UNAVAILABLE. */
  call(method, request, timeout = this.flags.timeout) {
    const once = () =>
      new Promise((ok, fail) => {
        this.client[method](request, { deadline: deadline(timeout) }, (err, resp) => (err ? fail(err) : ok(resp)));
      });
    return retryUnavailable(`${method} on ${this.addr}`, once, this.flags.retryFor);
  }
}

async function stepNodes(submit, watch) {
  for (const s of [submit, watch]) {
    s.nodeId = (await s.call('GetStatus', {})).node_id;
    console.log(`${s.name} node: ${s.nodeId} at ${s.addr}`);
  }
  if (submit.nodeId === watch.nodeId) {
    throw new CheckFailed(
      `--submit-addr and --watch-addr are the same node (${submit.nodeId}): give the app addresses of two sidecars of one cluster`,
    );
  }
}

// stepSubscribe opens the watch and reads its snapshot. It returns the open call and an
// async iterator over its responses.
async function stepSubscribe(watch, prefix) {
  const { timeout, ackTimeout, watchTimeout, retryFor } = watch.flags;
  // The stream's deadline covers the whole watch: snapshot, Submit, arrival.
  const budget = timeout + ackTimeout + watchTimeout;
  const open = async () => {
    const call = watch.client.Subscribe({ task_id_prefix: prefix, snapshot: true }, { deadline: deadline(budget) });
    const responses = call[Symbol.asyncIterator]();
    let n = 0;
    for (;;) {
      const { value: resp, done } = await responses.next();
      if (done) throw new CheckFailed(`Subscribe on ${watch.addr} ended before snapshot_complete`);
      if (resp.snapshot_complete) return { call, responses, n };
      n += entries(resp).length;
    }
  };
  const { call, responses, n } = await retryUnavailable(`Subscribe on ${watch.addr}`, open, retryFor);
  console.log(`watch ${watch.nodeId}: subscribed to '${prefix}' (snapshot: ${n} entries)`);
  return { call, responses };
}

async function stepSubmit(submit, prefix) {
  const { events: count, ackTimeout, timeout } = submit.flags;
  const events = Array.from({ length: count }, (_, i) => ({
    task_id: `${prefix}i-${i}`,
    payload: Buffer.from(JSON.stringify({ status: 'UP', n: i })),
    attributes: { lang: 'node' },
  }));
  const request = {
    events,
    ack: 'ACK_POLICY_ALL',
    ack_timeout: { seconds: Math.floor(ackTimeout), nanos: Math.round((ackTimeout % 1) * 1e9) },
  };
  // The deadline must outlast ack_timeout: the sidecar stops waiting at whichever comes
  // first, and a deadline that fires first loses the answer.
  const resp = await submit.call('Submit', request, ackTimeout + timeout);
  console.log(`submit ${submit.nodeId}: ${events.length} events, ack ALL within ${ackTimeout}s`);
  if (resp.versions.length !== events.length || resp.results.length !== events.length) {
    throw new CheckFailed(
      `Submit answered ${resp.versions.length} versions and ${resp.results.length} results for ${events.length} events`,
    );
  }
  const want = new Map();
  events.forEach((ev, i) => {
    const [version, res] = [resp.versions[i], resp.results[i]];
    console.log(`  ${ev.task_id}  ${res.outcome}  version ${version}  revision ${res.revision}`);
    if (res.outcome !== 'EVENT_OUTCOME_ACCEPTED') throw new CheckFailed(`${ev.task_id}: ${res.outcome} ${res.detail}`.trim());
    if (typeof version !== 'string') throw new CheckFailed(`version ${version} is a ${typeof version}, want a string (longs: String)`);
    want.set(ev.task_id, { version, payload: ev.payload });
  });
  for (const ack of resp.peer_acks) console.log(`  peer ${ack.peer}: ${ack.state}${ack.detail ? ` (${ack.detail})` : ''}`);
  if (!resp.satisfied) {
    throw new CheckFailed(`ACK_POLICY_ALL not satisfied: ${resp.peer_acks.map((a) => `${a.peer} ${a.state}`).join(', ')}`);
  }
  const notAcked = resp.peer_acks.filter((a) => a.state !== 'PEER_ACK_STATE_ACKED').map((a) => a.peer);
  if (resp.peer_acks.length === 0 || notAcked.length > 0) {
    throw new CheckFailed(`satisfied, yet peers not ACKED: ${notAcked.length ? notAcked.join(', ') : 'no peer listed'}`);
  }
  console.log(`  satisfied: every one of ${resp.peer_acks.length} peers acknowledged every event`);
  const v = resp.versions[0];
  if (BigInt(v) > BigInt(Number.MAX_SAFE_INTEGER)) {
    console.log(`  version ${v} is above 2^53: as a Number it would read ${Number(v)}; longs: String keeps it exact`);
  }
  return want;
}

/** Reads the stream until every event of want arrived, at its version, from origin. */
async function stepWatch(watch, { call, responses }, origin, want) {
  const started = Date.now();
  const missing = new Map(want);
  try {
    while (missing.size > 0) {
      const { value: resp, done } = await responses.next();
      if (done) throw new CheckFailed(`watch on ${watch.addr} ended; never saw ${[...missing.keys()].join(', ')}`);
      for (const e of entries(resp)) {
        const w = missing.get(e.event.task_id);
        if (w === undefined) continue;
        missing.delete(e.event.task_id);
        const ms = Date.now() - started;
        console.log(`watch ${watch.nodeId}: ${e.event.task_id} version ${e.event.version} from ${e.origin_node}, revision ${e.revision} (+${ms}ms)`);
        if (e.event.version !== w.version || e.origin_node !== origin || !w.payload.equals(e.event.payload)) {
          throw new CheckFailed(
            `watch saw ${e.event.task_id} as version ${e.event.version} from ${e.origin_node}, want version ${w.version} from ${origin}`,
          );
        }
      }
    }
  } catch (err) {
    if (err.code === Status.DEADLINE_EXCEEDED) {
      throw new CheckFailed(`watch on ${watch.addr}: deadline passed; never saw ${[...missing.keys()].join(', ')}`);
    }
    if (err.code !== undefined && !(err instanceof CheckFailed)) throw new CallFailed(`Subscribe on ${watch.addr}`, err);
    throw err;
  } finally {
    cancel(call);
  }
}

/** Ends a stream: the CANCELLED error that cancel() causes is expected. */
function cancel(call) {
  call.on('error', () => {});
  call.cancel();
}

async function stepGet(watch, origin, want) {
  const resp = await watch.call('Get', { task_ids: [...want.keys()] });
  const got = new Map(resp.entries.map((e) => [e.event.task_id, e]));
  console.log(`get ${watch.nodeId}: ${got.size} of ${want.size} keys (table revision ${resp.revision})`);
  for (const [taskId, w] of want) {
    const e = got.get(taskId);
    if (e === undefined) throw new CheckFailed(`Get on ${watch.addr}: ${taskId} missing`);
    console.log(`  ${taskId}  version ${e.event.version}  origin ${e.origin_node}  payload ${e.event.payload}`);
    // The exact round trip: the string Submit returned is the string Get returns. With
    // longs: Number both would be rounded to the same double and a neighbour's version
    // would compare equal too.
    if (e.event.version !== w.version) {
      throw new CheckFailed(`Get on ${watch.addr}: ${taskId} version ${e.event.version}, Submit returned ${w.version}`);
    }
    if (e.origin_node !== origin || !w.payload.equals(e.event.payload)) {
      throw new CheckFailed(`Get on ${watch.addr}: ${taskId} from ${e.origin_node} with payload ${e.event.payload}, want ${origin}'s`);
    }
  }
}

/** A bad request is refused as a whole with INVALID_ARGUMENT naming the field. */
async function stepInvalid(submit) {
  try {
    await submit.call('Submit', { events: [{ task_id: '' }] });
  } catch (err) {
    if (!(err instanceof CallFailed)) throw err;
    if (err.code !== Status.INVALID_ARGUMENT || !err.details.includes('task_id')) {
      throw new CheckFailed(`empty task_id: got ${err.message}, want INVALID_ARGUMENT naming task_id`);
    }
    console.log(`invalid: Submit with an empty task_id -> INVALID_ARGUMENT: ${err.details} (as expected)`);
    return;
  }
  throw new CheckFailed('Submit with an empty task_id was accepted, want INVALID_ARGUMENT');
}

async function run(flags) {
  const fanout = loadFanout(flags.protoDir);
  console.log(`fanout Node.js client: submit to ${flags.submitAddr}, watch ${flags.watchAddr}, prefix '${flags.prefix}'`);
  let submit, watch, want, stream;
  try {
    submit = new Sidecar('submit', flags.submitAddr, fanout, flags);
    watch = new Sidecar('watch', flags.watchAddr, fanout, flags);
    await stepNodes(submit, watch);
    stream = await stepSubscribe(watch, flags.prefix);
    want = await stepSubmit(submit, flags.prefix);
    await stepWatch(watch, stream, submit.nodeId, want);
    await stepGet(watch, submit.nodeId, want);
    await stepInvalid(submit);
  } finally {
    // Closing a client does not end its calls: a stream left open would keep the
    // process alive until its deadline.
    if (stream) cancel(stream.call);
    submit?.close();
    watch?.close();
  }
  if (flags.summary) writeSummary(flags.summary, submit, watch, want);
  console.log(
    `OK: ${want.size} events submitted to ${submit.nodeId} with ACK_POLICY_ALL, acknowledged by every peer, ` +
      `seen on ${watch.nodeId}'s watch and read back by Get`,
  );
}

function writeSummary(path, submit, watch, want) {
  const events = [...want].map(([task_id, w]) => ({ task_id, version: w.version, payload: w.payload.toString() }));
  writeFileSync(path, JSON.stringify({ submit_node: submit.nodeId, watch_node: watch.nodeId, events }, null, 2));
}

try {
  await run(parseFlags(process.argv.slice(2)));
} catch (err) {
  if (!(err instanceof CheckFailed || err instanceof CallFailed)) throw err;
  console.error(`FAIL: ${err.message}`);
  process.exitCode = 1;
}

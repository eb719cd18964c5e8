// bbc/sqs-consumer, the Node peer: `node peer.mjs KIND CONCURRENCY` (Node 22; QUEUE_URL, AWS_REGION and the
// subject's credentials in the environment; the endpoint is the queue URL's, the library's default
// `useQueueUrlAsEndpoint`). Installed with `npm ci` from this folder's package-lock.json into .bench/peers/sqs-consumer.
//
// One Consumer receives up to `batchSize` (at most 10) messages, runs the handler on all of them at once, deletes
// each with its own DeleteMessage as its handler returns, and polls again once the whole batch is done. Its users
// scale within a process by running several Consumer instances on the queue, so concurrency N is N / 8 instances of
// batch 8 (8 divides every concurrency the cells run), each with its own SQS client, as `Consumer.create` makes one.
// Everything else is the library's default: a 20 s long poll, no visibilityTimeout or heartbeatInterval (the
// queue's visibility applies), handleMessage returning the message to acknowledge it.
//
// The work is bench/peers/work.py's: noop returns, io50/io200 wait 50/200 ms on a timer, cpu5 spins 5 ms, slow8 and
// kill3 wait 8 and 3 s. With BENCH_RECORD set (the correctness cells), start and end lines go to that file.
import { appendFileSync } from "node:fs";
import { Consumer } from "sqs-consumer";

const SECONDS = { noop: 0, io50: 0.05, io200: 0.2, cpu5: 0.005, slow8: 8, kill3: 3 };
const BATCH = 8;

const [kind, concurrencyText] = process.argv.slice(2);
const concurrency = Number(concurrencyText);
if (!(kind in SECONDS) || !Number.isInteger(concurrency) || concurrency < 1) {
  console.error("usage: node peer.mjs KIND CONCURRENCY");
  process.exit(2);
}
const milliseconds = SECONDS[kind] * 1000;
const recordPath = process.env.BENCH_RECORD || "";

function record(event, key) {
  appendFileSync(recordPath, `${event} ${key} ${(Date.now() / 1000).toFixed(6)} ${process.pid}\n`);
}

function spin(ms) {
  // ms of the process's own CPU time (JavaScript runs on one thread), as work.py spins its thread's CPU time
  const end = process.cpuUsage().user + ms * 1000;
  while (process.cpuUsage().user < end) {
    // pure computation, holding the event loop as pure Python holds the interpreter
  }
}

async function handleMessage(message) {
  const key = recordPath ? JSON.parse(message.Body).n : null;
  if (key !== null) record("start", key);
  if (kind === "cpu5") spin(milliseconds);
  else if (milliseconds) await new Promise((resolve) => setTimeout(resolve, milliseconds));
  if (key !== null) record("end", key);
  return message;
}

const instances = Math.max(1, Math.ceil(concurrency / BATCH));
const batchSize = Math.min(BATCH, concurrency);
for (let i = 0; i < instances; i += 1) {
  const consumer = Consumer.create({ queueUrl: process.env.QUEUE_URL, batchSize, handleMessage });
  consumer.on("error", (error) => console.error(`error: ${error.message}`));
  consumer.on("processing_error", (error) => console.error(`processing_error: ${error.message}`));
  consumer.start();
}
console.log(`sqs-consumer: ${instances} instances of batch ${batchSize}, kind ${kind}`);

// A Service Bus flow through @azure/service-bus (the JavaScript SDK; rhea underneath, an AMQP
// stack other than the Python SDK's) via the recording proxy. Run by tests/test_proxy_js.py:
//
//   SB_CONNECTION_STRING="Endpoint=sb://localhost:5673;...;UseDevelopmentEmulator=true;" node flow.mjs everyday|redeliver
//
// Prints one JSON line: what the application saw.
import { ServiceBusClient } from "@azure/service-bus";

const connectionString = process.env.SB_CONNECTION_STRING;
if (!connectionString) throw new Error("SB_CONNECTION_STRING is not set");
const mode = process.argv[2] || "everyday";
const client = new ServiceBusClient(connectionString, { retryOptions: { maxRetries: 0, timeoutInMs: 20000 } });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function receiveN(receiver, count, wait = 5000) {
  const got = [];
  const deadline = Date.now() + wait * 2;
  while (got.length < count && Date.now() < deadline) {
    got.push(...(await receiver.receiveMessages(count - got.length, { maxWaitTimeInMs: wait })));
  }
  return got;
}

async function everyday() {
  const seen = {};
  const sender = client.createSender("work");
  await sender.sendMessages({ body: "one", messageId: "j1", applicationProperties: { k: 1 } });
  // one by one: on this branch a batch from this SDK reached sbconform serve empty (direct too)
  for (const id of ["j2", "j3", "j4", "j5"]) await sender.sendMessages({ body: id, messageId: id });
  await sender.close();

  const receiver = client.createReceiver("work");
  const got = await receiveN(receiver, 5);
  seen.first = got.map((m) => m.messageId).sort();
  const by = Object.fromEntries(got.map((m) => [m.messageId, m]));
  await receiver.renewMessageLock(by.j1);
  await receiver.completeMessage(by.j1);
  await receiver.abandonMessage(by.j2, { stage: "retried" });  // properties to modify (SETTLE-MOD-001)
  await receiver.deferMessage(by.j3);
  await receiver.deadLetterMessage(by.j4, { deadLetterReason: "bad", deadLetterErrorDescription: "js flow" });
  await receiver.completeMessage(by.j5);
  const again = await receiveN(receiver, 1);
  seen.again = again.map((m) => [m.messageId, m.deliveryCount]);
  seen.stage = again.map((m) => m.applicationProperties?.stage);
  for (const m of again) await receiver.completeMessage(m);
  const deferred = await receiver.receiveDeferredMessages([by.j3.sequenceNumber]);
  seen.deferred = deferred.map((m) => m.messageId);
  for (const m of deferred) await receiver.completeMessage(m);
  seen.peek = (await receiver.peekMessages(5)).map((m) => m.messageId);
  await receiver.close();

  const dlq = client.createReceiver("work", { subQueueType: "deadLetter" });
  const dead = await receiveN(dlq, 1);
  seen.dead = dead.map((m) => [m.messageId, m.deadLetterReason]);
  for (const m of dead) await dlq.completeMessage(m);
  await dlq.close();

  const ss = client.createSender("sess");
  await ss.sendMessages({ body: "s1", messageId: "js1", sessionId: "A" });
  await ss.sendMessages({ body: "s2", messageId: "js2", sessionId: "A" });
  await ss.close();
  const sr = await client.acceptSession("sess", "A");
  await sr.setSessionState("state-1");
  seen.state = String(await sr.getSessionState());
  await sr.renewSessionLock();
  const sgot = await receiveN(sr, 2);
  seen.session = sgot.map((m) => m.messageId);
  for (const m of sgot) await sr.completeMessage(m);
  await sr.close();
  return seen;
}

async function redeliver() {
  // against a broker that acknowledges complete but keeps the message
  const sender = client.createSender("short");
  await sender.sendMessages({ body: "x", messageId: "js-done-once" });
  await sender.close();
  let receiver = client.createReceiver("short");
  const [first] = await receiveN(receiver, 1);
  await receiver.completeMessage(first);
  await receiver.close();
  await sleep(1500); // past the 1 s lock
  receiver = client.createReceiver("short");
  const again = await receiveN(receiver, 1);
  for (const m of again) await receiver.completeMessage(m);
  await receiver.close();
  return { again: again.map((m) => m.messageId) };
}

try {
  const seen = mode === "redeliver" ? await redeliver() : await everyday();
  console.log(JSON.stringify(seen));
} finally {
  await client.close();
}

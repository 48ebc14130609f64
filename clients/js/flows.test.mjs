// Service Bus flows through @azure/service-bus (the JavaScript SDK, rhea underneath: an AMQP stack
// of its own) against `sbconform serve`. Run by tests/test_js_flows.py, which starts the server
// with the entities below and passes its connection string in SB_CONNECTION_STRING.
//
//   SB_CONNECTION_STRING="Endpoint=sb://localhost:5672;...;UseDevelopmentEmulator=true;" node --test flows.test.mjs
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient, isServiceBusError } from "@azure/service-bus";

const connectionString = process.env.SB_CONNECTION_STRING;
if (!connectionString) throw new Error("SB_CONNECTION_STRING is not set");
const client = new ServiceBusClient(connectionString, { retryOptions: { maxRetries: 0, timeoutInMs: 20000 } });
after(() => client.close());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function receiveAll(receiver, count, wait = 5000) {
  const got = [];
  const deadline = Date.now() + wait * 2;
  while (got.length < count && Date.now() < deadline) {
    got.push(...(await receiver.receiveMessages(count - got.length, { maxWaitTimeInMs: wait })));
  }
  return got;
}

test("send one, receive in peek-lock, complete", async () => {
  const sender = client.createSender("js-send");
  await sender.sendMessages({ body: "hello", messageId: "m1", subject: "greeting", applicationProperties: { n: 1, s: "x" } });
  const receiver = client.createReceiver("js-send");
  const [m] = await receiveAll(receiver, 1);
  assert.equal(m.body, "hello");
  assert.equal(m.messageId, "m1");
  assert.equal(m.subject, "greeting");
  assert.deepEqual(m.applicationProperties, { n: 1, s: "x" });
  assert.equal(m.deliveryCount, 0);
  assert.ok(m.sequenceNumber.toNumber() >= 1);
  assert.ok(m.lockedUntilUtc > new Date(Date.now() - 1000));
  assert.equal(m.state, "active");
  await receiver.completeMessage(m);
  assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 })).length, 0);
  await receiver.close();
  await sender.close();
});

test("batches are sized from the link's max-message-size", async () => {
  const sender = client.createSender("js-batch");
  const batch = await sender.createMessageBatch();
  assert.equal(batch.maxSizeInBytes, 256 * 1024);
  for (let i = 0; i < 20; i++) assert.ok(batch.tryAddMessage({ body: `b${i}`, messageId: `b${i}` }));
  assert.ok(!batch.tryAddMessage({ body: "x".repeat(300 * 1024) }));
  await sender.sendMessages(batch);
  const receiver = client.createReceiver("js-batch", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 20);
  assert.deepEqual(got.map((m) => m.body), Array.from({ length: 20 }, (_, i) => `b${i}`));
  await receiver.close();
  await sender.close();
});

test("schedule and cancel", async () => {
  const sender = client.createSender("js-schedule");
  const at = new Date(Date.now() + 60 * 60 * 1000);
  const [keep, cancel] = await sender.scheduleMessages([{ body: "keep" }, { body: "cancel" }], at);
  await sender.cancelScheduledMessages(cancel);
  const receiver = client.createReceiver("js-schedule");
  const peeked = await receiver.peekMessages(10, { fromSequenceNumber: keep });
  assert.equal(peeked.length, 1);
  assert.equal(peeked[0].body, "keep");
  assert.equal(peeked[0].state, "scheduled");
  assert.equal(peeked[0].scheduledEnqueueTimeUtc.getTime(), at.getTime());
  await receiver.close();
  await sender.close();
});

test("receive and delete", async () => {
  const sender = client.createSender("js-rad");
  await sender.sendMessages([{ body: "1" }, { body: "2" }]);
  const receiver = client.createReceiver("js-rad", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 2);
  assert.deepEqual(got.map((m) => m.body).sort(), ["1", "2"]);
  assert.equal((await receiver.peekMessages(10)).length, 0);
  await receiver.close();
  await sender.close();
});

test("abandon counts a delivery, dead-letter moves to the dead-letter queue", async () => {
  const sender = client.createSender("js-settle");
  await sender.sendMessages({ body: "s", messageId: "s1" });
  const receiver = client.createReceiver("js-settle");
  let [m] = await receiveAll(receiver, 1);
  await receiver.abandonMessage(m);
  [m] = await receiveAll(receiver, 1);
  assert.equal(m.deliveryCount, 1);
  await receiver.deadLetterMessage(m, { deadLetterReason: "why", deadLetterErrorDescription: "because" });
  const dlq = client.createReceiver("js-settle", { subQueueType: "deadLetter" });
  const [d] = await receiveAll(dlq, 1);
  assert.equal(d.messageId, "s1");
  assert.equal(d.deadLetterReason, "why");
  assert.equal(d.deadLetterErrorDescription, "because");
  await dlq.completeMessage(d);
  await dlq.close();
  await receiver.close();
  await sender.close();
});

test("abandon, defer and dead-letter with properties to modify (SETTLE-MOD-001)", async () => {
  const sender = client.createSender("js-modify");
  await sender.sendMessages({ body: "p", messageId: "p1", applicationProperties: { stage: "new", kind: "order" } });
  const receiver = client.createReceiver("js-modify");
  let [m] = await receiveAll(receiver, 1);
  await receiver.abandonMessage(m, { stage: "retried", attempt: 1 });
  [m] = await receiveAll(receiver, 1);
  assert.deepEqual(m.applicationProperties, { stage: "retried", kind: "order", attempt: 1 });
  const seq = m.sequenceNumber;
  await receiver.deferMessage(m, { stage: "deferred" });
  const [again] = await receiver.receiveDeferredMessages(seq);
  assert.equal(again.applicationProperties.stage, "deferred");
  await receiver.deadLetterMessage(again, { deadLetterReason: "why", deadLetterErrorDescription: "because", stage: "dead" });
  const dlq = client.createReceiver("js-modify", { subQueueType: "deadLetter" });
  const [d] = await receiveAll(dlq, 1);
  assert.equal(d.deadLetterReason, "why");
  assert.equal(d.applicationProperties.stage, "dead");
  assert.equal(d.applicationProperties.kind, "order");
  assert.equal(d.applicationProperties.attempt, 1);
  await dlq.completeMessage(d);
  await dlq.close();
  await receiver.close();
  await sender.close();
});

test("defer, then receive deferred by sequence number and complete", async () => {
  const sender = client.createSender("js-defer");
  await sender.sendMessages({ body: "later", messageId: "d1" });
  const receiver = client.createReceiver("js-defer");
  const [m] = await receiveAll(receiver, 1);
  const seq = m.sequenceNumber;
  await receiver.deferMessage(m);
  const [peeked] = await receiver.peekMessages(1, { fromSequenceNumber: seq });
  assert.equal(peeked.state, "deferred");
  const [again] = await receiver.receiveDeferredMessages(seq);
  assert.equal(again.messageId, "d1");
  await receiver.completeMessage(again);
  assert.equal((await receiver.peekMessages(1, { fromSequenceNumber: seq })).length, 0);
  await receiver.close();
  await sender.close();
});

test("renew lock, and auto lock renewal of a message without a MessageId", async () => {
  const sender = client.createSender("js-renew");
  await sender.sendMessages({ body: "r", messageId: "r1" });
  const receiver = client.createReceiver("js-renew");
  const [m] = await receiveAll(receiver, 1);
  const before = m.lockedUntilUtc.getTime();
  await sleep(50);
  const until = await receiver.renewMessageLock(m);
  assert.ok(until.getTime() > before);
  await receiver.completeMessage(m);
  await receiver.close();
  // a message sent without a MessageId gets one from the broker, which the SDK's
  // auto lock renewal keys on (subscribe with maxAutoLockRenewalDurationInMs)
  await sender.sendMessages({ body: "no id" });
  const auto = client.createReceiver("js-renew", { maxAutoLockRenewalDurationInMs: 20000 });
  const errors = [];
  const seen = await new Promise((resolve) => {
    const sub = auto.subscribe(
      {
        processMessage: async (msg) => {
          assert.ok(msg.messageId, "the broker assigns a MessageId");
          await sleep(11000); // more than two 5 s locks: renewed meanwhile
          sub.close().then(() => resolve(msg));
        },
        processError: async (args) => { errors.push(args.error); },
      },
      { autoCompleteMessages: true },
    );
  });
  assert.deepEqual(errors, []);
  assert.ok(seen.messageId);
  await auto.close();
  await sender.close();
});

test("sessions: accept next and named, state, renew", async () => {
  const sender = client.createSender("js-sessions");
  await sender.sendMessages([{ body: "a1", sessionId: "a" }, { body: "a2", sessionId: "a" }, { body: "b1", sessionId: "b" }]);
  const first = await client.acceptNextSession("js-sessions");
  const got = await receiveAll(first, first.sessionId === "a" ? 2 : 1);
  assert.ok(got.every((m) => m.sessionId === first.sessionId));
  await first.setSessionState("progress");
  assert.equal(String(await first.getSessionState()), "progress");
  const until = await first.renewSessionLock();
  assert.ok(until > new Date());
  for (const m of got) await first.completeMessage(m);
  await first.close();
  const other = first.sessionId === "a" ? "b" : "a";
  const named = await client.acceptSession("js-sessions", other);
  const rest = await receiveAll(named, other === "a" ? 2 : 1);
  assert.ok(rest.every((m) => m.sessionId === other));
  for (const m of rest) await named.completeMessage(m);
  await named.close();
});

test("no session available: acceptNextSession waits for the client's timeout, then fails", async () => {
  const quick = new ServiceBusClient(connectionString, { retryOptions: { maxRetries: 0, timeoutInMs: 3000 } });
  const started = Date.now();
  await assert.rejects(quick.acceptNextSession("js-empty-sessions"), (e) => {
    return isServiceBusError(e) && e.code === "ServiceTimeout";
  });
  assert.ok(Date.now() - started >= 2000, `refused after ${Date.now() - started} ms, not the client's 3 s`);
  await quick.close();
});

test("topics fan out to every subscription", async () => {
  const sender = client.createSender("js-topic");
  await sender.sendMessages({ body: "news", messageId: "t1" });
  for (const sub of ["s1", "s2"]) {
    const receiver = client.createReceiver("js-topic", sub);
    const [m] = await receiveAll(receiver, 1);
    assert.equal(m.messageId, "t1");
    await receiver.completeMessage(m);
    await receiver.close();
  }
  await sender.close();
});

test("duplicate detection drops a repeated MessageId", async () => {
  const sender = client.createSender("js-dup");
  await sender.sendMessages({ body: "once", messageId: "same" });
  await sender.sendMessages({ body: "twice", messageId: "same" });
  const receiver = client.createReceiver("js-dup", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 2, 1500);
  assert.deepEqual(got.map((m) => m.body), ["once"]);
  await receiver.close();
  await sender.close();
});

test("errors: unknown entity, settling twice, an oversize message", async () => {
  const nowhere = client.createSender("js-does-not-exist");
  await assert.rejects(nowhere.sendMessages({ body: "x" }), (e) => isServiceBusError(e) && e.code === "MessagingEntityNotFound");
  await nowhere.close();
  const sender = client.createSender("js-errors");
  await assert.rejects(sender.sendMessages({ body: "x".repeat(300 * 1024) }), (e) => e.code === "MessageSizeExceeded" || /size/i.test(e.message));
  await sender.sendMessages({ body: "once" });
  const receiver = client.createReceiver("js-errors");
  const [m] = await receiveAll(receiver, 1);
  await receiver.completeMessage(m);
  await assert.rejects(receiver.completeMessage(m));
  await receiver.close();
  await sender.close();
});

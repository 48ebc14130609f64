// The wire as the JavaScript SDK (@azure/service-bus, rhea underneath) sees it through `sbconform serve`:
// what a sender sent comes back exactly as sent (every section of an AmqpAnnotatedMessage, ids of
// every type, every body type), and what the broker sets it sets as Service Bus does. Run by
// tests/test_js_wire2.py, which starts the server with the entities below (SB_CONNECTION_STRING).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";

const connectionString = process.env.SB_CONNECTION_STRING;
if (!connectionString) throw new Error("SB_CONNECTION_STRING is not set");
const client = new ServiceBusClient(connectionString, { retryOptions: { maxRetries: 0, timeoutInMs: 20000 } });
after(() => client.close());

async function one(path, options = {}) {
  const receiver = client.createReceiver(path, { skipParsingBodyAsJson: true, ...options });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  assert.ok(m, `nothing received from ${path}`);
  return { receiver, m };
}

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("every section of an annotated message comes back as sent", async () => {
  const sender = client.createSender("w-sections");
  const sent = {
    bodyType: "data",
    body: Buffer.from([0, 1, 2, 255]),
    header: { durable: true, priority: 7, timeToLive: 3_600_000 },
    deliveryAnnotations: { "x-da": "d", "x-da-n": 5 },
    messageAnnotations: { "x-custom": "c", "x-number": 42 },
    applicationProperties: { int: 7, float: 1.5, bool: true, str: "s", nothing: null, negative: -123456789 },
    properties: {
      // (no userId: @azure/core-amqp neither writes nor reads it, messageProperties.js; no absoluteExpiryTime:
      // the SDK writes creation time plus the TTL over it, amqpAnnotatedMessage.js)
      messageId: "sections", to: "dest", subject: "subj", replyTo: "back",
      correlationId: "corr", contentType: "application/x-thing", contentEncoding: "gzip",
      groupSequence: 9, replyToGroupId: "rg", creationTime: 1_700_000_000_123,
    },
  };
  await sender.sendMessages(sent);
  const { receiver, m } = await one("w-sections");
  const raw = m._rawAmqpMessage;
  assert.deepEqual(Buffer.from(m.body), sent.body); // (raw.body is rhea's data Section: the SDK's own reading)
  assert.equal(raw.bodyType, "data");
  assert.equal(raw.header.durable, true);
  assert.equal(raw.header.priority, 7);
  assert.equal(raw.header.timeToLive, 3_600_000);
  assert.equal(raw.header.deliveryCount, 0);
  assert.deepEqual(raw.deliveryAnnotations, sent.deliveryAnnotations);
  for (const [k, v] of Object.entries(sent.messageAnnotations)) assert.equal(raw.messageAnnotations[k], v, k);
  assert.deepEqual(raw.applicationProperties, sent.applicationProperties);
  for (const [k, v] of Object.entries(sent.properties)) {
    const got = raw.properties[k];
    assert.deepEqual(Buffer.isBuffer(got) ? got.toString() : got, v, k);
  }
  assert.equal(m.timeToLive, 3_600_000);
  assert.equal(m.expiresAtUtc.getTime(), m.enqueuedTimeUtc.getTime() + 3_600_000);
  await receiver.completeMessage(m);
  await receiver.close();
  await sender.close();
});

// (rhea writes a Buffer message-id as a uuid: 16 bytes, rhea/lib/types.js wrap_message_id)
for (const [name, value] of [["string", "an-id"], ["number", 12345], ["buffer", Buffer.from("0123456789abcdef")]]) {
  test(`a ${name} message-id and correlation-id come back with their type`, async () => {
    const sender = client.createSender("w-ids");
    await sender.sendMessages({ body: "x", messageId: value, correlationId: value });
    const { receiver, m } = await one("w-ids", { receiveMode: "receiveAndDelete" });
    for (const got of [m.messageId, m.correlationId]) {
      if (Buffer.isBuffer(value)) assert.deepEqual(Buffer.from(got), value);
      else assert.equal(got, value);
      assert.equal(typeof got, typeof value);
    }
    await receiver.close();
    await sender.close();
  });
}

for (const [bodyType, body] of [["value", { k: [1, "two"], n: null }], ["sequence", [[1, "a"], ["b", 2]]], ["data", Buffer.from("bytes")]]) {
  test(`an ${bodyType} body comes back as sent`, async () => {
    const sender = client.createSender("w-bodies");
    await sender.sendMessages({ bodyType, body, properties: { messageId: bodyType } });
    const { receiver, m } = await one("w-bodies", { receiveMode: "receiveAndDelete" });
    assert.equal(m._rawAmqpMessage.bodyType, bodyType);
    assert.deepEqual(bodyType === "data" ? Buffer.from(m.body) : m.body, body);
    await receiver.close();
    await sender.close();
  });
}

test("application properties of each JavaScript type come back with it", async () => {
  const sender = client.createSender("w-props");
  const when = new Date("2024-02-29T12:34:56.789Z");
  await sender.sendMessages({ body: "p", applicationProperties: { when, big: 2 ** 53 - 1, small: -1, zero: 0, pi: Math.PI, t: true, f: false, e: "" } });
  const { receiver, m } = await one("w-props", { receiveMode: "receiveAndDelete" });
  assert.equal(m.applicationProperties.when, when.getTime()); // the SDK shows a timestamp as its milliseconds
  assert.deepEqual({ ...m.applicationProperties, when: undefined },
                   { when: undefined, big: 2 ** 53 - 1, small: -1, zero: 0, pi: Math.PI, t: true, f: false, e: "" });
  await receiver.close();
  await sender.close();
});

test("what the broker sets: sequence number, enqueued time, lock, lock token, delivery count", async () => {
  const sender = client.createSender("w-broker");
  const before = Date.now();
  await sender.sendMessages({ body: "b", messageId: "b1", partitionKey: "pk" });
  const { receiver, m } = await one("w-broker");
  const ann = m._rawAmqpMessage.messageAnnotations;
  assert.equal(m.partitionKey, "pk");
  assert.equal(ann["x-opt-partition-key"], "pk");
  assert.ok(m.sequenceNumber.toNumber() >= 1);
  assert.ok(m.enqueuedTimeUtc.getTime() >= before - 2000 && m.enqueuedTimeUtc.getTime() <= Date.now() + 2000);
  assert.ok(m.lockedUntilUtc.getTime() > m.enqueuedTimeUtc.getTime());
  assert.match(m.lockToken, GUID);
  assert.equal(m.deliveryCount, 0);
  assert.equal(m.state, "active");
  const renewed = await receiver.renewMessageLock(m); // the lock token as the SDK read it from the delivery tag
  assert.ok(renewed.getTime() >= m.lockedUntilUtc.getTime());
  await receiver.abandonMessage(m);
  const [again] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  assert.equal(again.deliveryCount, 1);
  assert.equal(again._rawAmqpMessage.header.deliveryCount, 1);
  assert.equal(again.sequenceNumber.toString(), m.sequenceNumber.toString());
  assert.notEqual(again.lockToken, m.lockToken);
  await receiver.completeMessage(again);
  await receiver.close();
  await sender.close();
});

test("a peek carries no lock and the message's state", async () => {
  const sender = client.createSender("w-peek");
  await sender.sendMessages({ body: "p", messageId: "peeked" });
  const receiver = client.createReceiver("w-peek");
  const [p] = await receiver.peekMessages(1);
  assert.equal(p.messageId, "peeked");
  assert.equal(p.lockToken, undefined);
  assert.equal(p.lockedUntilUtc, undefined);
  assert.equal(p.state, "active");
  assert.equal(p.deliveryCount, 0);
  await receiver.close();
  await sender.close();
});

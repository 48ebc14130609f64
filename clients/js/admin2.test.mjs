// The management REST API of `sbconform serve` through the JavaScript ServiceBusAdministrationClient,
// as Service Bus answers it (tests/test_js_flows.py): error statuses and the codes the client makes of
// them, what it refuses that the client does not check, runtime counts as the client parses them, paging,
// forwarding, updates that take effect over AMQP. (admin.test.mjs: the basic operations.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusAdministrationClient, ServiceBusClient } from "@azure/service-bus";

const connectionString = process.env.SB_ADMIN_CONNECTION_STRING;
if (!connectionString) throw new Error("SB_ADMIN_CONNECTION_STRING is not set");
const plainHttp = {
  name: "plainHttp",
  sendRequest: (request, next) => {
    request.url = request.url.replace(/^https:/, "http:");
    request.allowInsecureConnection = true;
    return next(request);
  },
};
const adminOf = (cs) => {
  const client = new ServiceBusAdministrationClient(cs, { retryOptions: { maxRetries: 0 } });
  client.pipeline.addPolicy(plainHttp);
  return client;
};
const admin = adminOf(connectionString);
const fails = (promise, status, code) =>
  assert.rejects(promise, (e) => {
    assert.equal(e.statusCode, status, e.message);
    if (code) assert.equal(e.code, code, e.message);
    return true;
  });

test("errors: statuses and the codes the client makes of them", async () => {
  await admin.createQueue("e-q");
  await fails(admin.createQueue("e-q"), 409, "MessageEntityAlreadyExistsError");
  await fails(admin.deleteQueue("e-none"), 404, "MessageEntityNotFoundError");
  await fails(admin.updateQueue({ ...(await admin.getQueue("e-q")), name: "e-none" }), 404, "MessageEntityNotFoundError");
  await assert.rejects(admin.getQueue("e-none"), (e) => e.code === "MessageEntityNotFoundError"); // (200 and an empty feed)
  await fails(admin.createQueue("e-bad", { lockDuration: "PT10M" }), 400, "ServiceError");
  await fails(admin.createSubscription("e-no-topic", "s"), 404, "MessageEntityNotFoundError");
  const q = await admin.getQueue("e-q");
  await fails(admin.updateQueue({ ...q, requiresSession: true }), 400, "ServiceError");
  const wrong = adminOf(connectionString.replace(/SharedAccessKey=[^;]*/, "SharedAccessKey=wrong"));
  await fails(wrong.getQueue("e-q"), 401, "UnauthorizedRequestError");
  await fails(wrong.createQueue("e-sneaky"), 401, "UnauthorizedRequestError");
  assert.ok(!(await admin.queueExists("e-sneaky")));
  await admin.deleteQueue("e-q");
});

test("UserMetadata: at most 1024 characters (the client sends any length)", async () => {
  await fails(admin.createQueue("m-long", { userMetadata: "m".repeat(1025) }), 400, "ServiceError");
  assert.ok(!(await admin.queueExists("m-long")));
  const created = await admin.createQueue("m-1024", { userMetadata: "m".repeat(1024) });
  assert.equal(created.userMetadata.length, 1024);
  await admin.deleteQueue("m-1024");
});

test("runtime properties as the client parses them", async () => {
  await admin.createQueue("r-q", { lockDuration: "PT30S" });
  await admin.createTopic("r-t");
  await admin.createSubscription("r-t", "s");
  const fresh = await admin.getQueueRuntimeProperties("r-q");
  assert.equal(fresh.accessedAt.getUTCFullYear(), 1); // never accessed: DateTime.MinValue
  const client = new ServiceBusClient(process.env.SB_CONNECTION_STRING);
  try {
    const sender = client.createSender("r-q");
    await sender.sendMessages([{ body: "a" }, { body: "b" }, { body: "c" }]);
    await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 3600e3));
    const receiver = client.createReceiver("r-q");
    const got = [];
    while (got.length < 2) got.push(...(await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 2000 })));
    await receiver.deadLetterMessage(got[0]);
    await receiver.deferMessage(got[1]);
    const topicSender = client.createSender("r-t");
    await topicSender.sendMessages({ body: "t" });
    await topicSender.scheduleMessages({ body: "t-later" }, new Date(Date.now() + 3600e3));
  } finally {
    await client.close();
  }
  const q = await admin.getQueueRuntimeProperties("r-q");
  assert.deepEqual([q.activeMessageCount, q.deadLetterMessageCount, q.scheduledMessageCount, q.totalMessageCount], [1, 1, 1, 4]);
  assert.ok(q.sizeInBytes > 0 && q.accessedAt > q.createdAt);
  const t = await admin.getTopicRuntimeProperties("r-t");
  assert.deepEqual([t.subscriptionCount, t.scheduledMessageCount], [1, 1]);
  const s = await admin.getSubscriptionRuntimeProperties("r-t", "s");
  assert.deepEqual([s.activeMessageCount, s.totalMessageCount], [1, 1]); // the topic's scheduled message is not the subscription's
  await admin.deleteQueue("r-q");
  await admin.deleteTopic("r-t");
});

test("lists page by maxPageSize and continuation token", async () => {
  await admin.createTopic("p-t");
  for (const name of ["p-a", "p-b", "p-c", "p-d", "p-e"]) await admin.createSubscription("p-t", name);
  const pages = [];
  for await (const page of admin.listSubscriptions("p-t").byPage({ maxPageSize: 2 })) pages.push(page.map((s) => s.subscriptionName));
  assert.deepEqual(pages, [["p-a", "p-b"], ["p-c", "p-d"], ["p-e"]]);
  const rest = await admin.listSubscriptions("p-t").byPage({ maxPageSize: 2, continuationToken: "4" }).next();
  assert.deepEqual(rest.value.map((s) => s.subscriptionName), ["p-e"]);
  for (const name of ["r1", "r2", "r3"]) await admin.createRule("p-t", "p-a", name, { sqlExpression: `n = ${name.slice(1)}` });
  const rules = [];
  for await (const page of admin.listRules("p-t", "p-a").byPage({ maxPageSize: 3 })) rules.push(page.map((r) => r.name));
  assert.deepEqual(rules, [["$Default", "r1", "r2"], ["r3"]]);
  await admin.deleteTopic("p-t");
});

test("forwarding and nested names round-trip; an update takes effect over AMQP", async () => {
  await admin.createQueue("f/target");
  const forwarding = await admin.createQueue("f-source", { forwardTo: "f/target" });
  assert.ok(forwarding.forwardTo.endsWith("/f/target"), forwarding.forwardTo);
  assert.equal((await admin.getQueue("f/target")).name, "f/target");
  const client = new ServiceBusClient(process.env.SB_CONNECTION_STRING);
  try {
    await client.createSender("f-source").sendMessages({ body: "forwarded" });
    const [m] = await client.createReceiver("f/target", { receiveMode: "receiveAndDelete" }).receiveMessages(1, { maxWaitTimeInMs: 3000 });
    assert.equal(m.body, "forwarded");
    const source = await admin.getQueue("f-source");
    await admin.updateQueue({ ...source, forwardTo: undefined, status: "SendDisabled" });
    await assert.rejects(client.createSender("f-source").sendMessages({ body: "refused" }), (e) => e.code === "MessagingEntityDisabled");
  } finally {
    await client.close();
  }
  assert.equal((await admin.getQueue("f-source")).forwardTo, undefined);
  await admin.deleteQueue("f-source");
  await admin.deleteQueue("f/target");
});

test("rules over AMQP (the rule manager): every kind listed as the client decodes them, and in the REST API", async () => {
  await admin.createTopic("rm-t");
  await admin.createSubscription("rm-t", "s");
  const client = new ServiceBusClient(process.env.SB_CONNECTION_STRING);
  try {
    const rules = client.createRuleManager("rm-t", "s");
    await rules.createRule("sql", { sqlExpression: "n > 3" }, { sqlExpression: "SET a = 'y'" });
    await rules.createRule("corr", { correlationId: "c", subject: "s", applicationProperties: { k: "v", b: true } });
    await rules.createRule("never", { sqlExpression: "1=0" });
    const listed = [];
    for await (const rule of rules.listRules()) listed.push(rule);
    assert.deepEqual(listed.map((r) => r.name), ["$Default", "sql", "corr", "never"]);
    assert.deepEqual(listed.map((r) => r.filter.sqlExpression), ["1=1", "n > 3", undefined, "1=0"]);
    assert.equal(listed[1].action.sqlExpression, "SET a = 'y'");
    assert.deepEqual([listed[2].filter.correlationId, listed[2].filter.subject], ["c", "s"]);
    assert.deepEqual(listed[2].filter.applicationProperties, { k: "v", b: true });
    await rules.deleteRule("never");
    const viaRest = [];
    for await (const rule of admin.listRules("rm-t", "s")) viaRest.push(rule.name);
    assert.deepEqual(viaRest, ["$Default", "sql", "corr"]);
  } finally {
    await client.close();
  }
  await admin.deleteTopic("rm-t");
});

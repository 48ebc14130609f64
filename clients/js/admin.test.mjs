// The management REST API of `sbconform serve` through the JavaScript SDK's
// ServiceBusAdministrationClient. Like the Python client it builds https:// URLs: a per-call
// pipeline policy sends them over plain HTTP to the emulator's port.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusAdministrationClient, ServiceBusClient } from "@azure/service-bus";

const connectionString = process.env.SB_ADMIN_CONNECTION_STRING;
if (!connectionString) throw new Error("SB_ADMIN_CONNECTION_STRING is not set");
const admin = new ServiceBusAdministrationClient(connectionString, { retryOptions: { maxRetries: 0 } });
// (the client takes no httpClient nor additionalPolicies: the policy joins its pipeline)
admin.pipeline.addPolicy({
  name: "plainHttp",
  sendRequest: (request, next) => {
    request.url = request.url.replace(/^https:/, "http:");
    request.allowInsecureConnection = true;
    return next(request);
  },
});

test("queues: create, get, update, list, runtime properties, delete", async () => {
  const created = await admin.createQueue("js-admin-q", { lockDuration: "PT30S", maxDeliveryCount: 4, userMetadata: "js" });
  assert.equal(created.name, "js-admin-q");
  const got = await admin.getQueue("js-admin-q");
  assert.equal(got.lockDuration, "PT30S");
  assert.equal(got.maxDeliveryCount, 4);
  assert.equal(got.userMetadata, "js");
  got.maxDeliveryCount = 6;
  await admin.updateQueue(got);
  assert.equal((await admin.getQueue("js-admin-q")).maxDeliveryCount, 6);
  const names = [];
  for await (const q of admin.listQueues()) names.push(q.name);
  assert.ok(names.includes("js-admin-q"));
  const runtime = await admin.getQueueRuntimeProperties("js-admin-q");
  assert.equal(runtime.totalMessageCount, 0);
  assert.equal(runtime.activeMessageCount, 0);
  assert.ok(await admin.queueExists("js-admin-q"));
  await admin.deleteQueue("js-admin-q");
  assert.ok(!(await admin.queueExists("js-admin-q")));
  await assert.rejects(admin.getQueue("js-admin-q"), (e) => e.code === "MessageEntityNotFoundError" || e.statusCode === 404);
});

test("topics and subscriptions", async () => {
  await admin.createTopic("js-admin-t");
  await admin.createSubscription("js-admin-t", "sub", { maxDeliveryCount: 2 });
  assert.equal((await admin.getSubscription("js-admin-t", "sub")).maxDeliveryCount, 2);
  const subs = [];
  for await (const s of admin.listSubscriptions("js-admin-t")) subs.push(s.subscriptionName);
  assert.deepEqual(subs, ["sub"]);
  assert.equal((await admin.getTopicRuntimeProperties("js-admin-t")).subscriptionCount, 1);
  await admin.deleteTopic("js-admin-t");
});

test("rules: create, get, update, list, delete; a rule made here filters what is sent", async () => {
  await admin.createTopic("js-admin-rules");
  await admin.createSubscription("js-admin-rules", "sub");
  const rules = async () => {
    const out = [];
    for await (const r of admin.listRules("js-admin-rules", "sub")) out.push(r);
    return out;
  };
  const [initial] = await rules();
  assert.equal(initial.name, "$Default");
  assert.equal(initial.filter.sqlExpression, "1=1");
  await admin.deleteRule("js-admin-rules", "sub", "$Default");
  const sql = await admin.createRule("js-admin-rules", "sub", "big", { sqlExpression: "qty > @n", sqlParameters: { "@n": 5 } },
    { sqlExpression: "SET tier = 'gold'" });
  assert.equal(sql.name, "big");
  assert.deepEqual(sql.filter.sqlParameters, { "@n": 5 });
  assert.equal(sql.action.sqlExpression, "SET tier = 'gold'");
  await admin.createRule("js-admin-rules", "sub", "corr", { subject: "paint", applicationProperties: { colour: "red", n: 2 } });
  const corr = await admin.getRule("js-admin-rules", "sub", "corr");
  assert.equal(corr.filter.subject, "paint");
  assert.deepEqual(corr.filter.applicationProperties, { colour: "red", n: 2 });
  assert.deepEqual((await rules()).map((r) => r.name), ["big", "corr"]);
  await assert.rejects(admin.createRule("js-admin-rules", "sub", "corr", { sqlExpression: "1=1" }),
    (e) => e.statusCode === 409);
  await assert.rejects(admin.createRule("js-admin-rules", "sub", "bad", { sqlExpression: "qty = = (" }),
    (e) => e.statusCode === 400 && /SQL filter expression is not valid/.test(e.message));
  corr.filter = { subject: "ink" };
  await admin.updateRule("js-admin-rules", "sub", corr);
  assert.equal((await admin.getRule("js-admin-rules", "sub", "corr")).filter.subject, "ink");
  assert.ok(await admin.ruleExists("js-admin-rules", "sub", "big"));

  const client = new ServiceBusClient(process.env.SB_CONNECTION_STRING);
  try {
    const sender = client.createSender("js-admin-rules");
    await sender.sendMessages([
      { body: "small", applicationProperties: { qty: 1 } },
      { body: "large", applicationProperties: { qty: 9 } },
      { body: "ink", subject: "ink" },
      { body: "paint", subject: "paint" },
    ]);
    const receiver = client.createReceiver("js-admin-rules", "sub", { receiveMode: "receiveAndDelete" });
    const got = [];
    while (got.length < 2) {
      const batch = await receiver.receiveMessages(10, { maxWaitTimeInMs: 2000 });
      if (batch.length === 0) break;
      got.push(...batch);
    }
    assert.deepEqual(got.map((m) => m.body).sort(), ["ink", "large"]);
    assert.equal(got.find((m) => m.body === "large").applicationProperties.tier, "gold");
  } finally {
    await client.close();
  }
  await admin.deleteRule("js-admin-rules", "sub", "big");
  assert.ok(!(await admin.ruleExists("js-admin-rules", "sub", "big")));
  await admin.deleteTopic("js-admin-rules");
});

test("a subscription created with a default rule has that rule instead of $Default's true filter", async () => {
  await admin.createTopic("js-admin-default-rule");
  await admin.createSubscription("js-admin-default-rule", "sub", {
    defaultRuleOptions: { name: "only-red", filter: { applicationProperties: { colour: "red" } } },
  });
  const names = [];
  for await (const r of admin.listRules("js-admin-default-rule", "sub")) names.push(r.name);
  assert.deepEqual(names, ["only-red"]);
  assert.deepEqual((await admin.getRule("js-admin-default-rule", "sub", "only-red")).filter.applicationProperties, { colour: "red" });
  await admin.deleteTopic("js-admin-default-rule");
});

test("namespace properties", async () => {
  const ns = await admin.getNamespaceProperties();
  assert.equal(ns.messagingSku, "Standard");
});

// The management REST API of `sbconform serve` through the JavaScript SDK's
// ServiceBusAdministrationClient. Like the Python client it builds https:// URLs: a per-call
// pipeline policy sends them over plain HTTP to the emulator's port.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusAdministrationClient } from "@azure/service-bus";

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

test("namespace properties", async () => {
  const ns = await admin.getNamespaceProperties();
  assert.equal(ns.messagingSku, "Standard");
});

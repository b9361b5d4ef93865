// A small program on openapi-fetch with the types openapi-typescript generates from
// openapi/openapi.json (docs/clients.md shows the commands). It produces a JSON message, a raw
// one with properties and a batch, consumes them, commits an offset, reads the group's lag and
// looks a message up by key, then prints what it saw as one JSON object.
//
//     node program.js BASE_URL TOKEN TOPIC     (schema.d.ts generated beside it)
//
// tests/e2e/test_generated_clients.py type-checks it (tsc --noEmit), builds and runs it against
// a live broker, as it runs the Python program (tests/clients/python/program.py), and checks
// both print the same.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type PutResult = components["schemas"]["PutResult"];

const GROUP = "billing";
const PUTS = 4;
// Messages are readable once dispatched to their queue, a moment after the put: the reads
// long-poll (wait_ms) until all are there, a bounded number of times.
const READS_MAX = 20;
type Message = components["schemas"]["ConsumedMessage"];

// The answer's data; a problem (or no data) ends the run with what the broker said.
function expect<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  if (answer.data === undefined) {
    throw new Error(`${answer.response.status}: ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

async function consume(
  client: ReturnType<typeof createClient<paths>>, topic: string, count: number,
): Promise<Message[]> {
  const messages: Message[] = [];
  for (let read = 0; read < READS_MAX && messages.length < count; read++) {
    const answer = expect(await client.GET("/v1/topics/{topic}/queues/{queue_id}/messages", {
      params: {
        path: { topic, queue_id: 0 },
        query: { offset: messages.length, body_encoding: "utf8", wait_ms: 500 },
      },
    }));
    messages.push(...answer.messages);
  }
  if (messages.length < count) {
    throw new Error(`read ${messages.length} of ${count} messages`);
  }
  return messages;
}

async function main(baseUrl: string, token: string, topic: string): Promise<object> {
  const client = createClient<paths>({
    baseUrl,
    headers: { Authorization: `Bearer ${token}` },
  });
  const path = { topic };
  expect(await client.POST("/v1/topics", {
    body: { name: topic, read_queue_count: 1, write_queue_count: 1 },
  }));
  const jsonPut = expect(await client.POST("/v1/topics/{topic}/messages", {
    params: { path },
    body: { body: "order 1 paid", keys: ["order-1"] },
  }));
  const rawPut = expect(await client.POST("/v1/topics/{topic}/messages", {
    params: {
      path,
      header: {
        "X-Twinlog-Keys": "order-2",
        "X-Twinlog-Properties": JSON.stringify({ region: "eu" }),
      },
    },
    // The spec's octet-stream body is a string (binary): a raw body goes as it is.
    body: new Uint8Array([255, 0, 114, 97, 119]) as unknown as string,
    bodySerializer: (body) => body as unknown as BodyInit,
    headers: { "Content-Type": "application/octet-stream" },
  }));
  const batch = expect(await client.POST("/v1/topics/{topic}/messages:batch", {
    params: { path },
    body: {
      messages: [
        { body: "b3JkZXIgMyBwYWlk", body_encoding: "base64", keys: ["order-3"] },
        { body: "order 4 paid" },
      ],
    },
  }));
  const messages = await consume(client, topic, PUTS);
  expect(await client.POST("/v1/groups", { body: { name: GROUP } }));
  const committed = expect(await client.PUT(
    "/v1/groups/{group}/offsets/{topic}/queues/{queue_id}", {
      params: { path: { group: GROUP, topic, queue_id: 0 } },
      body: { offset: 2 },
    }));
  // A 202 is a Problem too (committed without a replication or flush guarantee).
  if (!("offset" in committed)) {
    throw new Error(`committed without a guarantee: ${committed.detail}`);
  }
  const lag = expect(await client.GET("/v1/groups/{group}/lag", {
    params: { path: { group: GROUP }, query: { topic } },
  }));
  const found = expect(await client.GET("/v1/topics/{topic}/messages", {
    params: { path, query: { key: "order-3", body_encoding: "utf8" } },
  }));
  const puts: PutResult[] = [jsonPut, rawPut, ...batch.results];
  return {
    puts: puts.map((put) => put.status),
    offsets: puts.map((put) => put.queue_offset),
    messages: messages.map((message) => ({
      body: message.body,
      body_encoding: message.body_encoding,
      keys: message.keys,
      properties: message.properties,
    })),
    committed: committed.offset,
    lag: lag.total_lag,
    found: found.messages.map((message) => message.body),
    msg_id: jsonPut.msg_id,
  };
}

const [baseUrl, token, topic] = process.argv.slice(2);
console.log(JSON.stringify(await main(baseUrl, token, topic)));

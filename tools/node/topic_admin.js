// Topic administration with KafkaJS's admin client: create TOPIC with PARTITIONS partitions
// (RF 3), produce one record to each, grow it to GROW partitions (createPartitions), produce
// to the new ones, then delete it (deleteTopics) and list the topics; also the refusals
// (createPartitions to fewer, deleteTopics of an unknown topic). Prints one JSON object on
// stdout; exits non-zero on failure.
// usage: node topic_admin.js BOOTSTRAP TOPIC PARTITIONS GROW
const { Kafka, logLevel } = require("kafkajs");

async function refusal(fn) {
  try { await fn(); return null; } catch (err) {
    const cause = err.cause || err.originalError || err;   // a retried error comes wrapped in the retries' end
    return cause.type || cause.name || String(cause);
  }
}

async function main() {
  const [bootstrap, topic, partsText, growText] = process.argv.slice(2);
  const parts = parseInt(partsText, 10);
  const grow = parseInt(growText, 10);
  const kafka = new Kafka({ clientId: "jbodlab-kafkajs-admin", brokers: bootstrap.split(","),
                            logLevel: logLevel.NOTHING, retry: { retries: 8 } });
  const admin = kafka.admin();
  await admin.connect();
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: parts, replicationFactor: 3 }],
                                             waitForLeaders: true });
  // a producer per phase: KafkaJS's producer keeps its topic metadata (metadataMaxAge) and
  // would not see the new partitions
  const send = async (from, to) => {
    const producer = kafka.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    for (let p = from; p < to; p++) {
      await producer.send({ topic, acks: -1, messages: [{ partition: p, value: `v-${p}` }] });
    }
    await producer.disconnect();
  };
  await send(0, parts);
  await admin.createPartitions({ topicPartitions: [{ topic, count: grow }] });
  let meta = null;
  for (let i = 0; i < 100; i++) {
    meta = await admin.fetchTopicMetadata({ topics: [topic] });
    if (meta.topics[0].partitions.length === grow && meta.topics[0].partitions.every((p) => p.leader >= 0)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const grown = meta.topics[0].partitions.length;
  await send(parts, grow);
  const offsets = await admin.fetchTopicOffsets(topic);
  const notAnIncrease = await refusal(() => admin.createPartitions({ topicPartitions: [{ topic, count: parts }] }));
  await admin.deleteTopics({ topics: [topic], timeout: 30000 });
  let listed = null;
  for (let i = 0; i < 100; i++) {
    listed = await admin.listTopics();
    if (!listed.includes(topic)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  await admin.disconnect();
  // UNKNOWN_TOPIC_OR_PARTITION is retriable for KafkaJS: a client that does not retry it
  const once = new Kafka({ clientId: "jbodlab-kafkajs-admin", brokers: bootstrap.split(","),
                           logLevel: logLevel.NOTHING, retry: { retries: 0 } }).admin();
  await once.connect();
  const unknown = await refusal(() => once.deleteTopics({ topics: ["kafkajs-no-such-topic"], timeout: 5000 }));
  await once.disconnect();
  console.log(JSON.stringify({
    created, grown, stillListed: listed.includes(topic), notAnIncrease, unknown,
    highs: offsets.map((o) => [o.partition, Number(o.high)]).sort((a, b) => a[0] - b[0]),
  }));
}

main().catch((err) => { console.error(err && err.stack ? err.stack : err); process.exit(1); });

// Consume COUNT records of TOPIC in consumer group GROUP with KafkaJS, commit them, then
// describe the group and fetch its committed offsets with KafkaJS's admin client (and the
// topic's configs when asked). Prints one JSON object on stdout; exits non-zero on failure.
// usage: node group_consume.js BOOTSTRAP TOPIC GROUP COUNT [--describe-configs]
const { Kafka, logLevel, ConfigResourceTypes } = require("kafkajs");

async function main() {
  const [bootstrap, topic, group, countText, ...flags] = process.argv.slice(2);
  const count = parseInt(countText, 10);
  const kafka = new Kafka({ clientId: "jbodlab-kafkajs", brokers: bootstrap.split(","),
                            logLevel: logLevel.WARN, retry: { retries: 10 } });
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000,
                                    rebalanceTimeout: 20000 });
  const values = [];
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic: t, partition, message }) => {
      values.push(message.value.toString());
      await consumer.commitOffsets([{ topic: t, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
      if (values.length >= count) done();
    },
  });
  const timer = setTimeout(() => done(), 60000);
  await finished;
  clearTimeout(timer);
  const admin = kafka.admin();
  await admin.connect();
  const described = await admin.describeGroups([group]);
  const offsets = await admin.fetchOffsets({ groupId: group, topics: [topic] });
  let configs = null;
  if (flags.includes("--describe-configs")) {
    const res = await admin.describeConfigs({ includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }] });
    configs = Object.fromEntries(res.resources[0].configEntries.map((e) => [e.configName, e.configValue]));
  }
  await consumer.disconnect();
  const after = await admin.describeGroups([group]);
  await admin.disconnect();
  const g = described.groups[0];
  console.log(JSON.stringify({
    values,
    group: { state: g.groupId === group ? g.state : null, protocolType: g.protocolType, protocol: g.protocol,
             members: g.members.map((m) => m.clientId) },
    stateAfterLeave: after.groups[0].state,
    offsets: offsets[0].partitions.map((p) => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0]),
    configs,
  }));
}

main().catch((err) => { console.error(err && err.stack ? err.stack : err); process.exit(1); });

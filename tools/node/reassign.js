// Move partitions with KafkaJS's admin client: alterPartitionReassignments, then
// listPartitionReassignments until none of them is in progress (or the time is up).
// Prints one JSON object on stdout: {"during": [...], "after": [...], "elapsed_ms": n};
// exits non-zero on failure.
// usage: node reassign.js BOOTSTRAP TOPIC 'PARTITION=R1,R2,...' [...] [--timeout-s N]
const { Kafka, logLevel } = require("kafkajs");

function ongoing(listed) {
  const out = [];
  for (const t of listed.topics || []) {
    for (const p of t.partitions || []) {
      out.push({ topic: t.name, partition: p.partition, replicas: p.replicas,
                 adding: p.addingReplicas, removing: p.removingReplicas });
    }
  }
  return out;
}

async function main() {
  const args = process.argv.slice(2);
  let timeoutS = 60;
  const ti = args.indexOf("--timeout-s");
  if (ti >= 0) { timeoutS = parseInt(args[ti + 1], 10); args.splice(ti, 2); }
  const [bootstrap, topic, ...moves] = args;
  const partitionAssignment = moves.map((m) => {
    const [p, rs] = m.split("=");
    return { partition: parseInt(p, 10), replicas: rs.split(",").map((x) => parseInt(x, 10)) };
  });
  const kafka = new Kafka({ clientId: "jbodlab-kafkajs-admin", brokers: bootstrap.split(","),
                            logLevel: logLevel.WARN, retry: { retries: 10 } });
  const admin = kafka.admin();
  await admin.connect();
  const t0 = Date.now();
  try {
    await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment }], timeout: 30000 });
    const wanted = [{ topic, partitions: partitionAssignment.map((a) => a.partition) }];
    const during = ongoing(await admin.listPartitionReassignments({ topics: wanted, timeout: 30000 }));
    let after = during;
    while (after.length > 0 && Date.now() - t0 < timeoutS * 1000) {
      await new Promise((r) => setTimeout(r, 200));
      after = ongoing(await admin.listPartitionReassignments({ topics: wanted, timeout: 30000 }));
    }
    const all = ongoing(await admin.listPartitionReassignments({ timeout: 30000 }));
    console.log(JSON.stringify({ during, after, all, elapsed_ms: Date.now() - t0 }));
  } finally {
    await admin.disconnect();
  }
}

main().catch((e) => { console.error(e && e.stack ? e.stack : String(e)); process.exit(1); });

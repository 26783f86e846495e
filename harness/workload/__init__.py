"""The workload (I/O): real Kafka clients on the host against the lab's brokers (producers,
group consumers, lagging readers, the final drain), writing client ops to the ledger."""

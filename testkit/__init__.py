"""Test tooling, not part of the product: real controller and broker processes on loopback,
a client that speaks to the controller as a broker does, hostile frames. Used by the tests,
the benchmarks, `jbodlab demo` and the lab; the product packages never import it."""

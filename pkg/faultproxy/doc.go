// Package faultproxy is a TCP proxy for tests and benchmarks: between a client
// and a server on loopback it plays a network you control, with latency in
// each direction (fixed or growing with load) and faults on command. It knows
// TCP, not the protocol over it, except that the load model assumes request
// and response take turns on a connection (as MongoDB's wire protocol does).
//
//	p, err := faultproxy.Start(ctx, faultproxy.Config{Target: "127.0.0.1:27017"})
//	client, err := mongo.Connect(options.Client().
//		ApplyURI("mongodb://" + p.Addr() + "/").SetDirect(true))
//	p.SetDelay(2*time.Millisecond, 2*time.Millisecond) // a 4 ms round trip
//
// Latency: every chunk (one read of at most Config.ReadSize bytes) may be
// delivered at its read time plus the direction's delay, in the order read. A
// delay is latency, not bandwidth: a burst read together arrives together. A
// new delay applies to chunks read afterwards, and a chunk never overtakes an
// earlier one.
//
// Load: Config.LoadSlope (or Config.DelayFunc) adds delay that grows with the
// busy connections: busy from a request chunk until the first chunk of its
// reply. Replies nobody asked for (an exhaust cursor's batches) are idle.
//
// Memory: each side is read as fast as it sends; what may not be delivered
// yet is held in memory without limit. Not for untrusted traffic.
//
// Faults, as a client sees them:
//   - Cut: every open connection is reset on both sides (SO_LINGER 0);
//     reconnecting gets through.
//   - Refuse: new connections are accepted and reset at once, so a MongoDB
//     driver sees a server that went down; open ones are left alone (Cut and
//     Refuse together model a dead server). Closing the listener instead
//     would give "connection refused" but could lose the port.
//   - Blackhole: bytes are read and held both ways, on every connection: a
//     partition, where nothing fails and operations time out. Lifting it
//     delivers the held bytes in order.
//   - Target down: the connection is reset, as with Refuse.
//   - Close: every connection is closed; held bytes are dropped.
package faultproxy

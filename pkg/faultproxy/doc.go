// Package faultproxy is a TCP proxy for tests and benchmarks: it sits between
// a client and a server on loopback and plays a network you control — latency
// in each direction, fixed or growing with load, and faults on command. It
// knows TCP, not the protocol spoken over it, except that the load model
// assumes request and response take turns on a connection (as MongoDB's wire
// protocol does).
//
//	p, err := faultproxy.Start(ctx, faultproxy.Config{Target: "127.0.0.1:27017"})
//	...
//	client, err := mongo.Connect(options.Client().
//		ApplyURI("mongodb://" + p.Addr() + "/").SetDirect(true))
//	p.SetDelay(2*time.Millisecond, 2*time.Millisecond) // a 4 ms round trip
//	p.Cut()           // every open connection is reset; new ones work
//	p.Refuse(true)    // new connections are reset at once
//	p.Blackhole(true) // a partition: operations time out
//	p.Restore()       // refusing and partition end; held bytes go out in order
//
// # Latency
//
// Every chunk read from one side (one read, at most Config.ReadSize bytes) is
// stamped with the time it may be delivered: when it was read plus the
// direction's delay. A writer per connection and direction delivers chunks in
// the order read, each no earlier than its stamp. A delay is latency, not
// bandwidth: a burst read together arrives together, one delay later. A new
// delay applies to chunks read afterwards and a chunk never overtakes an
// earlier one, so a shorter delay takes effect once the older chunks are out.
//
// # Load
//
// Config.LoadSlope (or Config.DelayFunc) adds delay that grows with the number
// of busy connections: busy from when a request chunk arrives from the client
// until the first chunk of the reply arrives from the target. Replies the
// client did not ask for (an exhaust cursor's further batches) count as idle
// traffic.
//
// # Memory
//
// Each side is read as fast as it sends; whatever may not be delivered yet
// (delayed, partitioned, or waiting on a peer that does not read) is held in
// memory without limit. Not for untrusted traffic.
//
// # What a client experiences
//
//   - Cut: every open connection is closed with a TCP reset on both sides
//     (SO_LINGER 0): "connection reset by peer". A client that reconnects
//     gets through.
//   - Refuse: new connections complete the TCP handshake and are reset at
//     once, so the first read or write fails (or the dial, when the reset
//     lands while it still checks the socket). A MongoDB driver sees a server
//     that went down: the server is marked unknown, operations fail with a
//     server selection error. Open connections are left alone; Cut and Refuse
//     together model a server that died. (Closing the listener would give a
//     true "connection refused" but could lose the port to another process.)
//   - Blackhole: bytes are read and held, both ways, on every connection, new
//     ones included; nothing is delivered and nothing fails, as in a network
//     partition. Lifting it delivers the held bytes in order.
//   - Target down: the connection is reset, as with Refuse.
//   - Close: every connection is closed and bytes still held are dropped.
package faultproxy

// Package faultproxy is a TCP proxy for tests and benchmarks: it sits between
// a client and a server on loopback and plays a network you control — latency
// in each direction, fixed or growing with load, and faults on command. It
// knows TCP, not the protocol spoken over it; the one place it leans on a
// protocol shape is the load model, which assumes request and response take
// turns on a connection (as MongoDB's wire protocol does).
//
// Usage, with the MongoDB driver:
//
//	p, err := faultproxy.Start(ctx, faultproxy.Config{Target: "127.0.0.1:27017"})
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//	client, err := mongo.Connect(options.Client().
//		ApplyURI("mongodb://" + p.Addr() + "/").SetDirect(true))
//	...
//	p.SetDelay(2*time.Millisecond, 2*time.Millisecond) // a 4 ms round trip
//	p.Cut()           // every open connection is reset; new ones work
//	p.Refuse(true)    // new connections are reset at once
//	p.Blackhole(true) // a partition: operations time out
//	p.Restore()       // refusing and partition end; held bytes go out in order
//
// # Latency
//
// Every chunk of bytes read from one side (one read, at most
// Config.ReadSize bytes) is stamped with the time it may be delivered: the
// time it was read plus the direction's delay. A writer per connection and
// direction delivers chunks in the order they were read, each no earlier than
// its stamp. Chunks are not held back one after another, so a delay is
// latency, not bandwidth: a burst of chunks read together arrives together,
// one delay later. A new delay applies to chunks read afterwards; a chunk
// never overtakes an earlier one, so shortening a delay takes effect once the
// chunks stamped with the old one are out.
//
// # Load
//
// Config.LoadSlope (or Config.DelayFunc, for a model of your own) adds delay
// that grows with the number of busy connections: a connection is busy from
// when a request chunk arrives from its client until the first chunk of the
// reply arrives from the target. That matches a protocol where request and
// reply take turns, such as MongoDB's; replies the client did not ask for
// (an exhaust cursor's further batches) count as idle traffic.
//
// # Memory
//
// The proxy reads each side as fast as it sends and holds in memory, without
// limit, whatever it may not deliver yet (delayed, partitioned, or waiting on
// a peer that does not read). It is for tests and benchmarks on loopback, not
// for untrusted traffic.
//
// # What a client experiences
//
//   - Cut: every open connection is closed with a TCP reset on both sides
//     (SO_LINGER 0); reads and writes fail with "connection reset by peer".
//     The proxy keeps accepting, so a client that reconnects gets through.
//   - Refuse: new connections complete the TCP handshake and are then reset
//     at once, so the client's first read or write fails with a reset (or
//     its dial does, when the reset lands while the dial is still checking
//     the socket). A MongoDB driver treats this like a server that went down: the
//     handshake fails, the server is marked unknown and operations fail with
//     a server selection error. Open connections are left alone; Cut and
//     Refuse together model a server that died. (Closing the listener would
//     give a true "connection refused" but could lose the port to another
//     process before it is reopened.)
//   - Blackhole: bytes are read and held, in both directions and on every
//     connection, new ones included; nothing is delivered and nothing fails,
//     as in a network partition. Clients see their own timeouts. Lifting it
//     delivers the held bytes in order (those whose delay has passed at once).
//   - Target down: the connection is reset, as with Refuse.
//   - Close: every connection is closed and bytes still held are dropped.
package faultproxy

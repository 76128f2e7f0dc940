//go:build race

package consumer

// raceEnabled scales down the tests that load the embedded server with large
// data: under the race detector the server, running in the test process, is
// several times slower, and the properties they check hold at any size.
const raceEnabled = true

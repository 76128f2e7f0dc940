//go:build race

package main

// raceEnabled skips the tests that move hundreds of megabytes through the
// embedded server: under the race detector that server, running in the test
// process, is several times slower, and what they measure (the production
// binary's memory) is not what the detector checks.
const raceEnabled = true

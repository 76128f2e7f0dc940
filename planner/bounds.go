package planner

import "github.com/scorerefresh/scorerefresh/metrics"

// The two ceilings no drain beats, as the bench reports them next to its
// measurements: the same arithmetic as metrics.DrainRate, from what the bench
// calibrates (round trips per refresh, seconds per trip, the server's
// queries per second).

// LatencyCeiling is the refreshes per second usersInRefresh users in
// refresh at once achieve when each refresh takes roundTrips trips of
// secondsPerTrip: users in refresh ÷ (round trips × seconds per trip).
func LatencyCeiling(usersInRefresh, roundTrips, secondsPerTrip float64) float64 {
	return metrics.DrainRate(usersInRefresh, 1, roundTrips*secondsPerTrip, 1)
}

// ServerCeiling is the refreshes per second a server answering qps queries
// per second sustains at roundTrips queries a refresh: qps ÷ round trips.
func ServerCeiling(qps, roundTrips float64) float64 {
	if qps <= 0 || roundTrips <= 0 {
		return 0
	}
	return qps / roundTrips
}

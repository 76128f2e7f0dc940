package faultproxy

import "time"

// direction is the way bytes travel through the proxy.
type direction int

const (
	up   direction = iota // client to target: requests
	down                  // target to client: replies
)

// loadModel is the extra delay a chunk gets for the load on the proxy.
type loadModel struct {
	slope time.Duration
	fn    func(busy int) (up, down time.Duration)
}

// delay returns the extra delay of a chunk travelling in d while busy
// connections are busy (the chunk's own connection included when it is one).
func (m loadModel) delay(d direction, busy int) time.Duration {
	if m.fn != nil {
		u, dn := m.fn(busy)
		if d == up {
			return max(u, 0)
		}
		return max(dn, 0)
	}
	// The slope lands on requests only: holding a request back is how a
	// slower server looks from outside, and it keeps the connection busy for
	// longer, so load feeds back on itself as it does on a real server.
	if d == up && busy > 1 {
		return m.slope * time.Duration(busy-1)
	}
	return 0
}

package servertraits

// ProbedAs returns traits that a server once answered as info: what a
// service holds before it reconnects to a server of another version.
func ProbedAs(info Info) *Traits { return &Traits{known: true, info: info} }

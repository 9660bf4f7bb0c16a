package quorum

// MaxSplits is maxSplits, for the external tests.
const MaxSplits = maxSplits

// RepairsPending is how many keys wait for a repair (repair.go).
func (b *Backend) RepairsPending() int { return b.repairs.len() }

// Stripe is stripe, for the external tests.
func Stripe(key string) uint8 { return stripe(key) }

package pgbridge

// HoldStripe locks the stripe of db's key, as a slow operation on another
// key of the same stripe would, until unlock.
func HoldStripe(b *Backend, db int, key string) (unlock func()) {
	st := b.stripe(dbKey{db, key})
	st.mu.Lock()
	return st.mu.Unlock
}

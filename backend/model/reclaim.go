package model

// Reclaiming memory: what a reaper runs. The schedule (how often, how many
// rounds) is the caller's.

// Expired counts the keys deleted because their deadline passed, by an
// operation that found them so or by Sample.
func (s *Space) Expired() uint64 { return s.expired }

// Stored counts the entries held, live or not: what memory is spent on.
func (s *Space) Stored() int {
	n := 0
	for _, m := range s.dbs {
		n += len(m)
	}
	return n
}

// Sample looks at up to n keys of db and deletes those past their deadline
// at now; it returns how many it looked at and how many it deleted. Go's
// map iteration starts at a random place, which makes this a random
// sample.
func (s *Space) Sample(db int, n int, now int64) (seen, expired int) {
	m := s.dbs[db]
	for k, e := range m {
		if seen == n {
			break
		}
		seen++
		if !e.Live(now) {
			s.drop(db, k)
			expired++
		}
	}
	s.expired += uint64(expired)
	return seen, expired
}

// ShrinkMin is the peak below which Shrink leaves a map that still holds
// entries as it is.
const ShrinkMin = 1024

// Shrink gives back the memory of db's map where it is worth it, and
// reports whether it did. Go maps keep their buckets when entries are
// deleted, so a map that once held many keys would keep their memory after
// they expired: Shrink drops an empty map, and copies one that has fallen
// to a quarter of its peak (when that peak was at least ShrinkMin entries)
// into a new one of the right size; the copy costs at most a quarter of
// the peak, paid once per shrink.
func (s *Space) Shrink(db int) bool {
	m := s.dbs[db]
	switch {
	case m == nil:
		return false
	case len(m) == 0:
		s.dbs[db] = nil
		s.objs[db] = nil
	case s.peak[db] < ShrinkMin || len(m) > s.peak[db]/4:
		return false
	default:
		n := make(map[string]Entry, len(m))
		for k, e := range m {
			n[k] = e
		}
		s.dbs[db] = n
	}
	s.peak[db] = len(m)
	return true
}

// Reset empties s for reuse, keeping its maps' memory: for a caller that
// pools small spaces (pgbridge), where that memory is a few entries.
func (s *Space) Reset() {
	for db := range s.dbs {
		clear(s.dbs[db])
		clear(s.objs[db])
		s.peak[db] = 0
	}
	s.expired = 0
	s.Holder = nil
	s.fence, s.clock, s.NewFence = 0, 0, nil // a Space reused for other keys (pgbridge's rounds): its fences start over
}

package lockcheck

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of one Run.
type Report struct {
	Workers, Keys int
	TTL           time.Duration
	Elapsed       time.Duration

	Attempts  int64 // acquire calls
	Grants    int64 // acquires answered "got it"
	Contended int64 // acquires answered "held by another"
	Late      int64 // grants that arrived after their TTL bound (empty intervals, never held)

	Errors        map[string]int64  // failed acquires by kind (see ErrorKind); never counted as grants
	ErrorSamples  map[string]string // the first error text seen of each kind
	ReleaseErrors map[string]int64  // failed releases by kind

	Violations   []Violation   // overlapping grants of different workers on one key, in key and time order
	WorstOverlap time.Duration // the longest overlap among Violations

	Fenced          bool             // the grants came with fences (FencedLocker)
	FenceViolations []FenceViolation // grants whose fence did not grow (CheckFences)

	Intervals []Interval // every grant, for further analysis
}

// Violation is two grants of different workers on one key that overlap.
type Violation struct {
	Key     string
	A, B    Interval // A started first
	Overlap time.Duration
}

// FenceViolation is two grants of one key where B was asked for after A
// was granted, and B's fence is not greater than A's.
type FenceViolation struct {
	Key  string
	A, B Interval
}

// ErrorCount is the number of failed acquires of every kind.
func (r *Report) ErrorCount() int64 {
	var n int64
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// String is a multi-line human summary: counts, errors by kind, and the first
// few violations.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d workers on %d keys, ttl %v, %v: %d attempts, %d grants (%d late), %d contended, %d errors, %d violations",
		r.Workers, r.Keys, r.TTL, r.Elapsed.Round(time.Millisecond), r.Attempts, r.Grants, r.Late, r.Contended, r.ErrorCount(), len(r.Violations))
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, ", worst overlap %v", r.WorstOverlap)
	}
	if r.Fenced {
		fmt.Fprintf(&b, ", %d fence violations", len(r.FenceViolations))
	}
	b.WriteByte('\n')
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		fmt.Fprintf(&b, "  acquire error %-18s %6d  e.g. %q\n", k, r.Errors[k], r.ErrorSamples[k])
	}
	for _, k := range slices.Sorted(maps.Keys(r.ReleaseErrors)) {
		fmt.Fprintf(&b, "  release error %-18s %6d\n", k, r.ReleaseErrors[k])
	}
	const shown = 5
	for i, v := range r.Violations {
		if i == shown {
			fmt.Fprintf(&b, "  … and %d more violations\n", len(r.Violations)-shown)
			break
		}
		fmt.Fprintf(&b, "  VIOLATION %s: worker %d %s [%v, %v] and worker %d %s [%v, %v] overlap %v\n",
			v.Key, v.A.Worker, v.A.Token, v.A.Start, v.A.End, v.B.Worker, v.B.Token, v.B.Start, v.B.End, v.Overlap)
	}
	for i, v := range r.FenceViolations {
		if i == shown {
			fmt.Fprintf(&b, "  … and %d more fence violations\n", len(r.FenceViolations)-shown)
			break
		}
		fmt.Fprintf(&b, "  FENCE VIOLATION %s: worker %d %s granted at %v with fence %d, then worker %d %s asked at %v and got fence %d\n",
			v.Key, v.A.Worker, v.A.Token, v.A.Start, v.A.Fence, v.B.Worker, v.B.Token, v.B.Sent, v.B.Fence)
	}
	return b.String()
}

// Check finds every pair of intervals of different workers on one key that
// overlap (intervals are half-open: one ending where another starts does not
// overlap), and the longest overlap. Empty intervals (End ≤ Start) never
// overlap. The input is not modified.
func Check(ivs []Interval) ([]Violation, time.Duration) {
	sorted := slices.Clone(ivs)
	slices.SortFunc(sorted, func(a, b Interval) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End))
	})
	var (
		out    []Violation
		worst  time.Duration
		active []Interval // intervals of the current key still open at the current start
	)
	for i, iv := range sorted {
		if i > 0 && sorted[i-1].Key != iv.Key {
			active = active[:0]
		}
		if iv.End <= iv.Start {
			continue
		}
		active = slices.DeleteFunc(active, func(a Interval) bool { return a.End <= iv.Start })
		for _, a := range active {
			if a.Worker == iv.Worker {
				continue
			}
			ov := min(a.End, iv.End) - iv.Start
			out = append(out, Violation{Key: iv.Key, A: a, B: iv, Overlap: ov})
			worst = max(worst, ov)
		}
		active = append(active, iv)
	}
	return out, worst
}

// CheckFences finds every grant B whose fence is not greater than that of
// a grant A of the same key that was granted before B was asked for
// (A.Start < B.Sent): the fences of one key must grow in the order of
// its grants. It reports, for each such B, the A with the greatest fence.
// Grants that arrived too late to be used count too: their fences were
// given. The input is not modified.
func CheckFences(ivs []Interval) []FenceViolation {
	byKey := map[string][]Interval{}
	for _, iv := range ivs {
		byKey[iv.Key] = append(byKey[iv.Key], iv)
	}
	var out []FenceViolation
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		granted := slices.Clone(byKey[key])
		slices.SortFunc(granted, func(a, b Interval) int { return cmp.Compare(a.Start, b.Start) })
		asked := slices.Clone(byKey[key])
		slices.SortFunc(asked, func(a, b Interval) int { return cmp.Compare(a.Sent, b.Sent) })
		var top Interval // the greatest fence among the grants before the current ask
		i := 0
		for _, b := range asked {
			for ; i < len(granted) && granted[i].Start < b.Sent; i++ {
				if i == 0 || granted[i].Fence > top.Fence {
					top = granted[i]
				}
			}
			if i > 0 && b.Fence <= top.Fence {
				out = append(out, FenceViolation{Key: key, A: top, B: b})
			}
		}
	}
	return out
}

package model

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// backtrack is Redis 7.0's stringmatchlen without its skipLongerMatches
// shortcut: every '*' tries every run. Exponential, and plainly right: the
// reference Match is checked against on short inputs.
func backtrack(pattern, s []byte) bool {
	for len(pattern) > 0 {
		if pattern[0] == '*' {
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if backtrack(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		}
		if len(s) == 0 {
			return false
		}
		next, ok := matchOne(pattern, 0, s[0])
		if !ok {
			return false
		}
		pattern, s = pattern[next:], s[1:]
	}
	return len(s) == 0
}

// TestMatchAgreesWithBacktracking: on random short patterns and strings over
// a small alphabet (every element kind, escapes and unterminated classes
// included), Match answers what trying every run of every '*' answers.
func TestMatchAgreesWithBacktracking(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "b", "*", "**", "?", "[ab]", "[^a]", "[a-b]", "[b-a]", "\\*", "\\", "[", "[a", "]", "-"}
	for range 200000 {
		var p, s []byte
		for range r.IntN(7) {
			p = append(p, pieces[r.IntN(len(pieces))]...)
		}
		for range r.IntN(8) {
			s = append(s, "ab*-[]\\"[r.IntN(7)])
		}
		if got, want := Match(p, s), backtrack(p, s); got != want {
			t.Fatalf("Match(%q, %q) = %v; want %v", p, s, got, want)
		}
	}
}

// TestMatchNestedStarsIsPolynomial is Redis's "Regression for pattern
// matching long nested loops" (tests/unit/keyspace.tcl), and the same
// shape far larger: a matcher that backtracks into every '*' never returns.
func TestMatchNestedStarsIsPolynomial(t *testing.T) {
	if Match([]byte("a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"), bytes.Repeat([]byte("a"), 40)) {
		t.Error("Redis's regression pattern matched 40 a's; want no match")
	}
	pattern := append(bytes.Repeat([]byte("a*"), 500), 'b')
	s := bytes.Repeat([]byte("a"), 4000)
	if Match(pattern, s) {
		t.Errorf("500 nested stars matched %d a's without a b; want no match", len(s))
	}
	if !Match(pattern, append(s, 'b')) {
		t.Errorf("500 nested stars did not match %d a's and a b; want a match", len(s))
	}
}

// BenchmarkMatchNestedStars: the regression pattern against 40 a's.
func BenchmarkMatchNestedStars(b *testing.B) {
	p, s := []byte("a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"), bytes.Repeat([]byte("a"), 40)
	for b.Loop() {
		Match(p, s)
	}
}

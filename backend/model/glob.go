package model

// Match reports whether s matches the glob pattern as Redis's
// stringmatchlen does (KEYS, SCAN MATCH, PSUBSCRIBE): '*' any run, '?' one
// byte, '[abc]', '[^abc]' and '[a-z]' classes, and '\' quoting the next
// byte.
//
// It runs in O(len(pattern) × len(s)) whatever the pattern: on a mismatch
// it goes back only to the last '*' seen, one byte further into s. Going
// back to an earlier '*' could not help, since the last one can already
// take any run the earlier one would have left it. Redis 7.0 gets the same
// bound from its skipLongerMatches flag; a matcher that backtracks into
// every '*' takes exponential time on "a*a*…*b" against a run of 'a's.
func Match(pattern, s []byte) bool {
	p, i := 0, 0
	star, starAt := -1, 0 // the pattern after the last '*', and where in s it was tried last
	for i < len(s) {
		if p < len(pattern) && pattern[p] == '*' {
			for p < len(pattern) && pattern[p] == '*' {
				p++
			}
			if p == len(pattern) {
				return true
			}
			star, starAt = p, i
			continue
		}
		if p < len(pattern) {
			if next, ok := matchOne(pattern, p, s[i]); ok {
				p, i = next, i+1
				continue
			}
		}
		if star < 0 {
			return false
		}
		starAt++
		p, i = star, starAt
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchOne matches the byte c against the pattern element at p (anything
// but '*') and returns where the pattern goes on.
func matchOne(pattern []byte, p int, c byte) (int, bool) {
	switch pattern[p] {
	case '?':
		return p + 1, true
	case '[':
		rest, ok := matchClass(pattern[p+1:], c)
		return len(pattern) - len(rest), ok
	case '\\':
		if p+1 < len(pattern) {
			p++
		}
	}
	return p + 1, pattern[p] == c
}

// matchClass matches c against the class that p starts (after '['), and
// returns the pattern after the class.
func matchClass(p []byte, c byte) ([]byte, bool) {
	not := len(p) > 0 && p[0] == '^'
	if not {
		p = p[1:]
	}
	match := false
	for len(p) > 0 && p[0] != ']' {
		switch {
		case p[0] == '\\' && len(p) >= 2:
			p = p[1:]
			match = match || p[0] == c
		case len(p) >= 3 && p[1] == '-':
			lo, hi := p[0], p[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || (c >= lo && c <= hi)
			p = p[2:]
		default:
			match = match || p[0] == c
		}
		p = p[1:]
	}
	if len(p) > 0 {
		p = p[1:] // the ']'
	}
	return p, match != not
}

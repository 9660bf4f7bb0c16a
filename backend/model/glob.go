package model

// Match reports whether s matches the glob pattern as Redis's
// stringmatchlen does (KEYS, SCAN MATCH): '*' any run, '?' one byte,
// '[abc]', '[^abc]' and '[a-z]' classes, and '\' quoting the next byte.
func Match(pattern, s []byte) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if Match(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			var ok bool
			if pattern, ok = matchClass(pattern[1:], s[0]); !ok {
				return false
			}
			s = s[1:]
			continue
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || pattern[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		pattern = pattern[1:]
	}
	return len(s) == 0
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

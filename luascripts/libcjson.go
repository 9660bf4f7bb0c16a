package luascripts

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/resp"
)

// The cjson library Redis bundles (Lua CJSON 2.1.0, lua_cjson.c with its
// strbuf and fpconv): JSON with its number formatting ("%.14g"), its
// array rules (sparse arrays, {} as an object), escapes ("/" as "\/"),
// its parser's leniencies (strtod numbers, "nan", hex) and its error
// texts. cjson.null is a userdata, as Redis's light userdata NULL.
//
// Its settings (encode_max_depth …) last for the script that sets them: a
// run starts from the defaults (Redis keeps them in the server until it
// restarts, for every later script of every client).

// cjsonConfig is json_config_t's settings.
type cjsonConfig struct {
	sparseConvert  int
	sparseRatio    int
	sparseSafe     int
	encodeMaxDepth int
	decodeMaxDepth int
	encodeInvalid  int // 0 off, 1 on, 2 null
	precision      int
	keepBuffer     int
	decodeInvalid  int
}

var cjsonDefaults = cjsonConfig{sparseRatio: 2, sparseSafe: 10, encodeMaxDepth: 1000, decodeMaxDepth: 1000,
	decodeInvalid: 1, keepBuffer: 1, precision: 14}

// cjsonModule builds a cjson table whose functions share cfg; null is
// cjson.null.
func cjsonModule(L *lua.LState, cfg *cjsonConfig, null *lua.LUserData) *lua.LTable {
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"encode": func(L *lua.LState) int { return cjsonEncode(L, cfg, null) },
		"decode": func(L *lua.LState) int { return cjsonDecode(L, cfg, null) },
		"encode_sparse_array": func(L *lua.LState) int {
			cjsonArgs(L, 3)
			enumOption(L, 1, &cfg.sparseConvert, nil)
			intOption(L, 2, &cfg.sparseRatio, 0, math.MaxInt32)
			intOption(L, 3, &cfg.sparseSafe, 0, math.MaxInt32)
			return 3
		},
		"encode_max_depth": func(L *lua.LState) int {
			cjsonArgs(L, 1)
			return intOption(L, 1, &cfg.encodeMaxDepth, 1, math.MaxInt32)
		},
		"decode_max_depth": func(L *lua.LState) int {
			cjsonArgs(L, 1)
			return intOption(L, 1, &cfg.decodeMaxDepth, 1, math.MaxInt32)
		},
		"encode_number_precision": func(L *lua.LState) int {
			cjsonArgs(L, 1)
			return intOption(L, 1, &cfg.precision, 1, 14)
		},
		"encode_keep_buffer": func(L *lua.LState) int {
			cjsonArgs(L, 1)
			return enumOption(L, 1, &cfg.keepBuffer, nil)
		},
		"encode_invalid_numbers": func(L *lua.LState) int {
			cjsonArgs(L, 1)
			return enumOption(L, 1, &cfg.encodeInvalid, []string{"off", "on", "null"})
		},
		"decode_invalid_numbers": func(L *lua.LState) int {
			cjsonArgs(L, 1)
			return enumOption(L, 1, &cfg.decodeInvalid, nil)
		},
		"new": func(L *lua.LState) int {
			c := cjsonDefaults
			L.Push(cjsonModule(L, &c, null))
			return 1
		},
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	t.RawSetString("null", null)
	t.RawSetString("_NAME", lua.LString("cjson"))
	t.RawSetString("_VERSION", lua.LString("2.1.0"))
	return t
}

// cjsonArgs is json_arg_init: at most n arguments, the missing ones nil.
func cjsonArgs(L *lua.LState, n int) {
	if L.GetTop() > n {
		argError(L, n+1, "found too many arguments")
	}
	for L.GetTop() < n {
		L.Push(lua.LNil)
	}
}

// intOption is json_integer_option: sets *setting from argument i unless
// it is nil, and pushes the setting.
func intOption(L *lua.LState, i int, setting *int, min, max int) int {
	if L.Get(i) != lua.LNil {
		v := int(int32(checkInteger(L, i))) // lua_Integer into a C int
		if v < min || v > max {
			argError(L, 1, "expected integer between "+strconv.Itoa(min)+" and "+strconv.Itoa(max)) // sic: #1 whatever i
		}
		*setting = v
	}
	L.Push(lua.LNumber(*setting))
	return 1
}

// enumOption is json_enum_option with bool_true 1: a boolean, or one of
// options (off/on when nil); it pushes the setting, as a boolean when it
// is off or on.
func enumOption(L *lua.LState, i int, setting *int, options []string) int {
	if options == nil {
		options = []string{"off", "on"}
	}
	if arg := L.Get(i); arg != lua.LNil {
		if b, ok := arg.(lua.LBool); ok {
			*setting = 0
			if b {
				*setting = 1
			}
		} else {
			name := checkString(L, i)
			found := -1
			for j, o := range options {
				if o == name {
					found = j
					break
				}
			}
			if found < 0 {
				argError(L, i, "invalid option '"+name+"'")
			}
			*setting = found
		}
	}
	if *setting == 0 || *setting == 1 {
		L.Push(lua.LBool(*setting == 1))
	} else {
		L.Push(lua.LString(options[*setting]))
	}
	return 1
}

// jsonEncoder is one cjson.encode. stack counts the values the C encoder
// holds on its Lua stack (lua_checkstack's limit).
type jsonEncoder struct {
	L     *lua.LState
	cfg   *cjsonConfig
	null  *lua.LUserData
	b     []byte
	stack int
}

func cjsonEncode(L *lua.LState, cfg *cjsonConfig, null *lua.LUserData) int {
	if L.GetTop() != 1 {
		argError(L, 1, "expected 1 argument")
	}
	e := &jsonEncoder{L: L, cfg: cfg, null: null, stack: 1}
	e.value(L.Get(1), 0)
	L.Push(lua.LString(e.b))
	return 1
}

func (e *jsonEncoder) fail(v lua.LValue, reason string) {
	luaErrorf(e.L, "Cannot serialise %s: %s", v.Type().String(), reason)
}

// jsonEscapes is char2escape: the bytes cjson escapes, and how.
var jsonEscapes = func() [256]string {
	var t [256]string
	for c := range 0x20 {
		t[c] = "\\u00" + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])
	}
	t['\b'], t['\t'], t['\n'], t['\f'], t['\r'] = "\\b", "\\t", "\\n", "\\f", "\\r"
	t['"'], t['/'], t['\\'], t[0x7f] = "\\\"", "\\/", "\\\\", "\\u007f"
	return t
}()

func (e *jsonEncoder) str(s string) {
	e.b = append(e.b, '"')
	for i := 0; i < len(s); i++ {
		if esc := jsonEscapes[s[i]]; esc != "" {
			e.b = append(e.b, esc...)
		} else {
			e.b = append(e.b, s[i])
		}
	}
	e.b = append(e.b, '"')
}

func (e *jsonEncoder) number(v lua.LNumber) {
	n := float64(v)
	bad := math.IsInf(n, 0) || math.IsNaN(n)
	switch e.cfg.encodeInvalid {
	case 0:
		if bad {
			e.fail(v, "must not be NaN or Inf")
		}
	case 1:
		if math.IsNaN(n) {
			e.b = append(e.b, "nan"...)
			return
		}
	default:
		if bad {
			e.b = append(e.b, "null"...)
			return
		}
	}
	e.b = resp.AppendFloat(e.b, n, e.cfg.precision)
}

func (e *jsonEncoder) value(v lua.LValue, depth int) {
	switch x := v.(type) {
	case lua.LString:
		e.str(string(x))
	case lua.LNumber:
		e.number(x)
	case lua.LBool:
		if x {
			e.b = append(e.b, "true"...)
		} else {
			e.b = append(e.b, "false"...)
		}
	case *lua.LNilType:
		e.b = append(e.b, "null"...)
	case *lua.LUserData:
		if x != e.null {
			e.fail(v, "type not supported")
		}
		e.b = append(e.b, "null"...)
	case *lua.LTable:
		depth++
		if depth > e.cfg.encodeMaxDepth || e.stack+3 > maxCStack {
			luaErrorf(e.L, "Cannot serialise, excessive nesting (%d)", depth)
		}
		if n := e.arrayLength(x); n > 0 {
			e.b = append(e.b, '[')
			e.stack++
			for i := 1; i <= n; i++ {
				if i > 1 {
					e.b = append(e.b, ',')
				}
				e.value(x.RawGetInt(i), depth)
			}
			e.stack--
			e.b = append(e.b, ']')
			return
		}
		e.b = append(e.b, '{')
		e.stack += 2
		first := true
		x.ForEach(func(k, val lua.LValue) {
			if !first {
				e.b = append(e.b, ',')
			}
			first = false
			switch kk := k.(type) {
			case lua.LNumber:
				e.b = append(e.b, '"')
				e.number(kk)
				e.b = append(e.b, '"', ':')
			case lua.LString:
				e.str(string(kk))
				e.b = append(e.b, ':')
			default:
				e.fail(k, "table key must be a number or string")
			}
			e.value(val, depth)
		})
		e.stack -= 2
		e.b = append(e.b, '}')
	default:
		e.fail(v, "type not supported")
	}
}

// arrayLength is lua_array_length: the largest key when every key is a
// whole number >= 1 (0 for an empty table), -1 for an object, and an
// error or -1 for an excessively sparse array.
func (e *jsonEncoder) arrayLength(t *lua.LTable) int {
	max, items, array := int32(0), int32(0), true
	t.ForEach(func(k, _ lua.LValue) {
		if !array {
			return
		}
		if n, ok := k.(lua.LNumber); ok && n != 0 {
			f := float64(n)
			if math.Floor(f) == f && f >= 1 {
				if f > float64(max) {
					max = cInt32(f)
				}
				items++
				return
			}
		}
		array = false
	})
	if !array {
		return -1
	}
	ratio := int32(e.cfg.sparseRatio)
	if ratio > 0 && max > items*ratio && max > int32(e.cfg.sparseSafe) {
		if e.cfg.sparseConvert == 0 {
			e.fail(t, "excessively sparse array")
		}
		return -1
	}
	return int(max)
}

// The parser's token types, named as in its errors.
const (
	tObjBegin = iota
	tObjEnd
	tArrBegin
	tArrEnd
	tString
	tNumber
	tBoolean
	tNull
	tColon
	tComma
	tEnd
	tWhitespace
	tError
	tUnknown
)

var jsonTokenNames = []string{"T_OBJ_BEGIN", "T_OBJ_END", "T_ARR_BEGIN", "T_ARR_END", "T_STRING", "T_NUMBER",
	"T_BOOLEAN", "T_NULL", "T_COLON", "T_COMMA", "T_END", "T_WHITESPACE", "T_ERROR", "T_UNKNOWN"}

type jsonToken struct {
	typ   int
	index int
	str   string // a string's value, or an error's text
	num   float64
	b     bool
}

// jsonDecoder is one cjson.decode. The text ends at its first NUL, as the
// C string it reads does.
type jsonDecoder struct {
	L     *lua.LState
	cfg   *cjsonConfig
	null  *lua.LUserData
	s     string
	p     int
	depth int
	stack int
}

func (d *jsonDecoder) at(i int) byte {
	if i < len(d.s) {
		return d.s[i]
	}
	return 0
}

func cjsonDecode(L *lua.LState, cfg *cjsonConfig, null *lua.LUserData) int {
	if L.GetTop() != 1 {
		argError(L, 1, "expected 1 argument")
	}
	s := checkString(L, 1)
	if len(s) >= 2 && (s[0] == 0 || s[1] == 0) {
		luaErrorf(L, "JSON parser does not support UTF-16 or UTF-32")
	}
	d := &jsonDecoder{L: L, cfg: cfg, null: null, s: s, stack: 1}
	tok := d.next()
	v := d.value(&tok)
	tok = d.next()
	if tok.typ != tEnd {
		d.fail("the end", &tok)
	}
	L.Push(v)
	return 1
}

func (d *jsonDecoder) fail(want string, tok *jsonToken) {
	found := jsonTokenNames[tok.typ]
	if tok.typ == tError {
		found = tok.str
	}
	luaErrorf(d.L, "Expected %s but found %s at character %d", want, found, tok.index+1)
}

func (d *jsonDecoder) tokenError(tok *jsonToken, msg string) {
	tok.typ, tok.index, tok.str = tError, d.p, msg
}

func (d *jsonDecoder) next() jsonToken {
	for {
		c := d.at(d.p)
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			break
		}
		d.p++
	}
	tok := jsonToken{index: d.p}
	c := d.at(d.p)
	switch c {
	case '{', '}', '[', ']', ',', ':':
		tok.typ = map[byte]int{'{': tObjBegin, '}': tObjEnd, '[': tArrBegin, ']': tArrEnd, ',': tComma, ':': tColon}[c]
		d.p++
		return tok
	case 0:
		tok.typ = tEnd
		return tok
	case '"':
		d.stringToken(&tok)
		return tok
	}
	rest := d.s[d.p:]
	switch {
	case c == '-' || isDigit(c):
		if d.cfg.decodeInvalid == 0 && d.invalidNumber() {
			d.tokenError(&tok, "invalid number")
			return tok
		}
		d.numberToken(&tok)
	case strings.IndexByte("fiInNt+", c) < 0:
		d.tokenError(&tok, "invalid token")
	case strings.HasPrefix(rest, "true"):
		tok.typ, tok.b = tBoolean, true
		d.p += 4
	case strings.HasPrefix(rest, "false"):
		tok.typ = tBoolean
		d.p += 5
	case strings.HasPrefix(rest, "null"):
		tok.typ = tNull
		d.p += 4
	case d.cfg.decodeInvalid != 0 && d.invalidNumber():
		d.numberToken(&tok)
	default:
		d.tokenError(&tok, "invalid token")
	}
	return tok
}

// invalidNumber is json_is_invalid_number: what strtod reads but JSON
// does not allow (a leading +, hex, leading zeros, inf, nan).
func (d *jsonDecoder) invalidNumber() bool {
	p := d.p
	if d.at(p) == '+' {
		return true
	}
	if d.at(p) == '-' {
		p++
	}
	if c := d.at(p); c == '0' {
		c2 := d.at(p + 1)
		return c2|0x20 == 'x' || isDigit(c2)
	} else if c <= '9' {
		return false
	}
	rest := strings.ToLower(d.s[p:min(p+3, len(d.s))])
	return rest == "inf" || rest == "nan"
}

func (d *jsonDecoder) numberToken(tok *jsonToken) {
	tok.typ = tNumber
	n, end := strtod(d.s, d.p)
	if end == d.p {
		d.tokenError(tok, "invalid number")
		return
	}
	tok.num = n
	d.p = end
}

var jsonUnescape = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 't': '\t', 'n': '\n', 'f': '\f', 'r': '\r', 'u': 'u'}

func (d *jsonDecoder) stringToken(tok *jsonToken) {
	d.p++
	var b []byte
	for {
		c := d.at(d.p)
		if c == '"' {
			break
		}
		if c == 0 {
			d.tokenError(tok, "unexpected end of string")
			return
		}
		if c == '\\' {
			c = jsonUnescape[d.at(d.p+1)]
			if c == 'u' {
				if d.unicodeEscape(&b) {
					continue
				}
				d.tokenError(tok, "invalid unicode escape code")
				return
			}
			if c == 0 {
				d.tokenError(tok, "invalid escape code")
				return
			}
			d.p++
		}
		b = append(b, c)
		d.p++
	}
	d.p++
	tok.typ, tok.str = tString, string(b)
}

func (d *jsonDecoder) hex4(at int) int {
	v := 0
	for i := range 4 {
		c := d.at(at + i)
		var x int
		switch {
		case isDigit(c):
			x = int(c - '0')
		case 'a' <= c|0x20 && c|0x20 <= 'f':
			x = int(c|0x20-'a') + 10
		default:
			return -1
		}
		v = v<<4 | x
	}
	return v
}

// unicodeEscape is json_append_unicode_escape: \uXXXX, or a surrogate
// pair of them, as UTF-8.
func (d *jsonDecoder) unicodeEscape(b *[]byte) bool {
	cp := d.hex4(d.p + 2)
	if cp < 0 {
		return false
	}
	n := 6
	if cp&0xF800 == 0xD800 {
		if cp&0x400 != 0 || d.at(d.p+6) != '\\' || d.at(d.p+7) != 'u' {
			return false
		}
		low := d.hex4(d.p + 8)
		if low < 0 || low&0xFC00 != 0xDC00 {
			return false
		}
		cp = ((cp&0x3FF)<<10 | low&0x3FF) + 0x10000
		n = 12
	}
	*b = utf8.AppendRune(*b, rune(cp))
	d.p += n
	return true
}

func (d *jsonDecoder) descend(slots int) {
	d.depth++
	if d.depth <= d.cfg.decodeMaxDepth && d.stack+slots <= maxCStack {
		return
	}
	luaErrorf(d.L, "Found too many nested data structures (%d) at character %d", d.depth, d.p)
}

func (d *jsonDecoder) value(tok *jsonToken) lua.LValue {
	switch tok.typ {
	case tString:
		return lua.LString(tok.str)
	case tNumber:
		return lua.LNumber(tok.num)
	case tBoolean:
		return lua.LBool(tok.b)
	case tNull:
		return d.null
	case tObjBegin:
		d.descend(3)
		t := d.L.NewTable()
		d.stack++
		next := d.next()
		if next.typ == tObjEnd {
			d.depth--
			d.stack--
			return t
		}
		for {
			if next.typ != tString {
				d.fail("object key string", &next)
			}
			key := lua.LString(next.str)
			d.stack++
			if next = d.next(); next.typ != tColon {
				d.fail("colon", &next)
			}
			next = d.next()
			t.RawSet(key, d.value(&next))
			d.stack--
			next = d.next()
			if next.typ == tObjEnd {
				d.depth--
				d.stack--
				return t
			}
			if next.typ != tComma {
				d.fail("comma or object end", &next)
			}
			next = d.next()
		}
	case tArrBegin:
		d.descend(2)
		t := d.L.NewTable()
		d.stack++
		next := d.next()
		if next.typ == tArrEnd {
			d.depth--
			d.stack--
			return t
		}
		for i := 1; ; i++ {
			t.RawSetInt(i, d.value(&next))
			next = d.next()
			if next.typ == tArrEnd {
				d.depth--
				d.stack--
				return t
			}
			if next.typ != tComma {
				d.fail("comma or array end", &next)
			}
			next = d.next()
		}
	}
	d.fail("value", tok)
	return nil
}

// strtod is glibc's strtod on s from i: the number and where it ends (i
// when there is none). Decimal and hexadecimal numbers, inf, infinity and
// nan, in any case, after spaces and a sign.
func strtod(s string, i int) (float64, int) {
	at := func(j int) byte {
		if j < len(s) {
			return s[j]
		}
		return 0
	}
	p := i
	for c := at(p); c == ' ' || c >= '\t' && c <= '\r'; c = at(p) {
		p++
	}
	neg := false
	if c := at(p); c == '+' || c == '-' {
		neg = c == '-'
		p++
	}
	signed := func(f float64) float64 {
		if neg {
			return math.Copysign(f, -1)
		}
		return f
	}
	lower := func(j, n int) string { return strings.ToLower(s[min(j, len(s)):min(j+n, len(s))]) }
	switch {
	case lower(p, 8) == "infinity":
		return signed(math.Inf(1)), p + 8
	case lower(p, 3) == "inf":
		return signed(math.Inf(1)), p + 3
	case lower(p, 3) == "nan":
		end := p + 3
		if at(end) == '(' {
			j := end + 1
			for c := at(j); isAlnum(c) || c == '_'; c = at(j) {
				j++
			}
			if at(j) == ')' {
				end = j + 1
			}
		}
		return signed(math.Float64frombits(0x7ff8000000000000)), end
	}
	isHex := func(c byte) bool { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'f' }
	if at(p) == '0' && at(p+1)|0x20 == 'x' && (isHex(at(p+2)) || at(p+2) == '.' && isHex(at(p+3))) {
		j := p + 2
		for isHex(at(j)) {
			j++
		}
		if at(j) == '.' {
			j++
			for isHex(at(j)) {
				j++
			}
		}
		mant := s[p+2 : j]
		exp := "p0"
		if at(j)|0x20 == 'p' {
			k := j + 1
			if c := at(k); c == '+' || c == '-' {
				k++
			}
			if isDigit(at(k)) {
				for isDigit(at(k)) {
					k++
				}
				exp, j = s[j:k], k
			}
		}
		f, _ := strconv.ParseFloat("0x"+mant+exp, 64)
		return signed(f), j
	}
	j, digits := p, 0
	for isDigit(at(j)) {
		j++
		digits++
	}
	if at(j) == '.' {
		j++
		for isDigit(at(j)) {
			j++
			digits++
		}
	}
	if digits == 0 {
		return 0, i
	}
	if at(j)|0x20 == 'e' {
		k := j + 1
		if c := at(k); c == '+' || c == '-' {
			k++
		}
		if isDigit(at(k)) {
			for isDigit(at(k)) {
				k++
			}
			j = k
		}
	}
	f, _ := strconv.ParseFloat(s[p:j], 64)
	return signed(f), j
}

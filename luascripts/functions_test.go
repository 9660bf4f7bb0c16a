package luascripts

import (
	"context"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// TestFunctionLoadAndCall: a library registers its functions at load, and
// a run of one calls it with KEYS and ARGV as arguments, under its flags.
func TestFunctionLoadAndCall(t *testing.T) {
	code := "#!lua name=mylib\n" +
		"local function add(a) return a + 1 end\n" +
		"redis.register_function('inc', function(keys, args) return {add(tonumber(args[1])), keys[1]} end)\n" +
		"redis.register_function{function_name='get', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes', 'ALLOW-OOM'}, description='reads'}\n" +
		"redis.register_function{function_name='put', callback=function(keys, args) return redis.call('set', keys[1], args[1]) end, flags={'no-writes'}}\n"
	lib, err := LoadLibrary(code)
	if err != nil {
		t.Fatal(err)
	}
	if lib.Name != "mylib" || len(lib.Functions) != 3 || lib.Functions[1].Description != "reads" ||
		strings.Join(lib.Functions[1].Flags, ",") != "no-writes,allow-oom" || lib.Functions[0].HasDescription {
		t.Fatalf("library %+v", lib)
	}
	r := New(Config{})
	c := &echoCaller{data: map[string]string{"k": "v"}}
	run := func(fn string, keys []string, args ...string) (backend.Value, error) {
		var a [][]byte
		for _, s := range args {
			a = append(a, []byte(s))
		}
		return r.Run(context.Background(), backend.Script{Src: code, Function: fn}, keys, a, c)
	}
	v, err := run("inc", []string{"k"}, "41")
	if err != nil || len(v.Elems) != 2 || v.Elems[0].Int != 42 || string(v.Elems[1].Str) != "k" {
		t.Fatalf("inc = %+v, %v", v, err)
	}
	if v, err := run("get", []string{"k"}); err != nil || string(v.Str) != "v" {
		t.Fatalf("get = %+v, %v", v, err)
	}
	if _, err := run("put", []string{"k"}, "x"); err == nil || !strings.Contains(err.Error(), "Write commands are not allowed from read-only scripts") ||
		!strings.Contains(err.Error(), "script: put, on @user_function:5.") {
		t.Fatalf("put = %v", err)
	}
	// a script's globals KEYS and ARGV are not a function's
	code2 := "#!lua name=l2\nredis.register_function('f', function() return KEYS end)"
	_, err = r.Run(context.Background(), backend.Script{Src: code2, Function: "f"}, nil, nil, c)
	if re, ok := err.(*backend.ReplyError); !ok || re.Reply != "ERR user_function:2: Script attempted to access nonexistent global variable 'KEYS' script: f, on @user_function:2." {
		t.Fatalf("KEYS = %v", err)
	}
}

// TestFunctionLoadErrors: FUNCTION LOAD's errors in Redis 7.0.15's words.
func TestFunctionLoadErrors(t *testing.T) {
	for code, want := range map[string]string{
		"return 1":                         "ERR Missing library metadata",
		"#!lua":                            "ERR Invalid library metadata",
		"#!lua\n":                          "ERR Library name was not given",
		"#!lua name=a b\n":                 "ERR Invalid metadata value given: b",
		"#!lua name=a name=b\n":            "ERR Invalid metadata value, name argument was given multiple times",
		"#!lua name=\n":                    "ERR " + msgBadName,
		"#!py name=a\n":                    "ERR Engine 'py' not found",
		"#!lua name=a\nreturn 1 +":         "ERR Error compiling function: user_function:2: unexpected symbol near '<eof>'",
		"#!lua name=a\nreturn 1":           "ERR No functions registered",
		"#!lua name=a\nreturn math.pi":     "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'math'",
		"#!lua name=a\nredis.call('ping')": "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'",
		"#!lua name=a\na = 1":              "ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table",
		"#!lua name=a\nredis.register_function('f')":                                                              "ERR Error registering functions: ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
		"#!lua name=a\nlocal a = 1 while 1 do a = a + 1 end":                                                      "ERR Error registering functions: ERR FUNCTION LOAD timeout",
		"#!lua name=a\nredis.register_function('f', function() end) redis.register_function('f', function() end)": "ERR Error registering functions: ERR Function already exists in the library",
	} {
		_, err := LoadLibrary(code)
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", code, err, want)
		}
	}
}

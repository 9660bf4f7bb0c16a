package backend

import (
	"fmt"
	"strings"
)

// The exact reply texts of a real Redis 7, without the leading "-" and the
// trailing CRLF. Clients match on these strings, so every one is copied from
// a real server's reply and the differential test in tests/ keeps it honest.
// Every text that is Redis's own lives in this file; texts that are
// lockproxy's (TRYAGAIN reasons, "ERR lockproxy …" refusals, the passthrough's
// and the script runner's own messages) stay with the package that says them.
// Texts for commands Redis 7 does not have (IFEQ, DELIFEQ, DELEX) follow
// Redis 8.4 and Valkey 9.
const (
	MsgSyntax           = "ERR syntax error"
	MsgNotInteger       = "ERR value is not an integer or out of range"
	MsgNotFloat         = "ERR value is not a valid float"
	MsgDBOutOfRange     = "ERR DB index is out of range"
	MsgNoScript         = "NOSCRIPT No matching script. Please use EVAL."
	MsgNoAuth           = "NOAUTH Authentication required."
	MsgWrongPass        = "WRONGPASS invalid username-password pair or user is disabled."
	MsgAuthNoPassword   = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	MsgNoProto          = "NOPROTO unsupported protocol version"
	MsgMultiNested      = "ERR MULTI calls can not be nested"
	MsgExecWithoutMulti = "ERR EXEC without MULTI"
	MsgDiscardNoMulti   = "ERR DISCARD without MULTI"
	MsgExecAbort        = "EXECABORT Transaction discarded because of previous errors."
	MsgExpireNXXX       = "ERR NX and XX, GT or LT options at the same time are not compatible"
	MsgExpireGTLT       = "ERR GT and LT options at the same time are not compatible"
	MsgClientName       = "ERR Client names cannot contain spaces, newlines or special characters."
	MsgNumKeysTooBig    = "ERR Number of keys can't be greater than number of args"
	MsgNumKeysNegative  = "ERR Number of keys can't be negative"
	MsgWrongType        = "WRONGTYPE Operation against a key holding the wrong kind of value"
	MsgHashNotInteger   = "ERR hash value is not an integer"
	MsgOverflow         = "ERR increment or decrement would overflow"
	MsgDecrOverflow     = "ERR decrement would overflow"
	MsgMinMaxNotFloat   = "ERR min or max is not a float"
	MsgMinMaxNotLex     = "ERR min or max not valid string range item"
	MsgZAddXXNX         = "ERR XX and NX options at the same time are not compatible"
	MsgZAddGTLTNX       = "ERR GT, LT, and/or NX options at the same time are not compatible"
	MsgZAddIncrPair     = "ERR INCR option supports a single increment-element pair"
	MsgScoreNaN         = "ERR resulting score is not a number (NaN)"
	MsgZRangeLimit      = "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
	MsgZRangeLexScores  = "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
	MsgNoSuchKey        = "ERR no such key"
	MsgIndexOutOfRange  = "ERR index out of range"
	MsgNotPositive      = "ERR value is out of range, must be positive"
	MsgInvalidCursor    = "ERR invalid cursor"
	MsgSameObject       = "ERR source and destination objects are the same"
	MsgInternal         = "ERR internal error"
	MsgMaxClients       = "ERR max number of clients reached"
	MsgHelloNoAuth      = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	MsgProtoVersion     = "ERR Protocol version is not an integer or out of range"
	MsgInvalidClientID  = "ERR Invalid client ID"
	MsgInvalidCondition = "ERR Invalid condition. Use IFEQ, IFNE, IFDEQ, or IFDNE"
	MsgScriptTooBig     = "ERR script is larger than max-script-bytes"
	MsgScriptFlushMode  = "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
	MsgStackLimit       = "ERR reached lua stack limit"
)

// Protocol errors for a request over a limit.
const (
	MsgInvalidMultibulk = "ERR Protocol error: invalid multibulk length"
	MsgInvalidBulk      = "ERR Protocol error: invalid bulk length"
	MsgUnauthMultibulk  = "ERR Protocol error: unauthenticated multibulk length"
	MsgUnauthBulk       = "ERR Protocol error: unauthenticated bulk length"
	MsgTooBigInline     = "ERR Protocol error: too big inline request"
	MsgTooBigMultibulk  = "ERR Protocol error: too big mbulk count string"
	MsgTooBigBulk       = "ERR Protocol error: too big bulk count string"
)

// The errors Redis 7 gives a redis.call it refuses.
const (
	MsgScriptUnknown  = "ERR Unknown Redis command called from script"
	MsgScriptArity    = "ERR Wrong number of args calling Redis command from script"
	MsgScriptNoScript = "ERR This Redis command is not allowed from script"
	MsgScriptReadOnly = "ERR Write commands are not allowed from read-only scripts."
	MsgScriptNoArgs   = "ERR Please specify at least one argument for this redis lib call"
)

// ErrWrongArgs is the arity error of cmd, e.g. "ERR wrong number of
// arguments for 'set' command". cmd is the lower-case full name
// ("client|setname" for a subcommand).
func ErrWrongArgs(cmd string) string {
	return "ERR wrong number of arguments for '" + strings.ToLower(cmd) + "' command"
}

// ErrNoPerm is the ACL refusal of cmd to a user without the permission.
func ErrNoPerm(cmd string) string {
	return "NOPERM this user has no permissions to run the '" + strings.ToLower(cmd) + "' command"
}

// ErrHelloSyntax is HELLO's reply to an option it does not know.
func ErrHelloSyntax(opt string) string {
	return "ERR Syntax error in HELLO option '" + opt + "'"
}

// ErrUnrecognizedOption is CLIENT SETINFO's reply to an attribute it does
// not know.
func ErrUnrecognizedOption(opt string) string {
	return "ERR Unrecognized option '" + opt + "'"
}

// ErrUnknownClientType is CLIENT KILL TYPE's reply to a bad type.
func ErrUnknownClientType(typ string) string {
	return "ERR Unknown client type '" + typ + "'"
}

// ErrConfigSetOption is CONFIG SET's reply to a parameter it does not know.
func ErrConfigSetOption(name string) string {
	return "ERR Unknown option or number of arguments for CONFIG SET - '" + name + "'"
}

// ErrExecAbortBecause is EXEC's reply when a queued command was refused
// with reply (an error line); its "ERR " prefix goes.
func ErrExecAbortBecause(reply string) string {
	return "EXECABORT Transaction discarded because of: " + strings.TrimPrefix(reply, "ERR ")
}

// ErrExpectedBulk is the protocol error for a multibulk element that does
// not start with '$'; got is the byte as Redis prints it.
func ErrExpectedBulk(got string) string {
	return "ERR Protocol error: expected '$', got '" + got + "'"
}

// ErrInvalidExpire is "ERR invalid expire time in 'set' command" for cmd.
func ErrInvalidExpire(cmd string) string {
	return "ERR invalid expire time in '" + strings.ToLower(cmd) + "' command"
}

// ErrUnknownCommand is Redis's reply to an unknown command: the name and the
// first arguments, each quoted and followed by a space, cut as Redis cuts
// them (name to 128 bytes, the argument list to about 128 bytes).
func ErrUnknownCommand(name string, args [][]byte) string {
	var b strings.Builder
	for _, a := range args {
		if b.Len() >= 128 {
			break
		}
		s := string(a)
		if i := strings.IndexByte(s, 0); i >= 0 {
			s = s[:i] // Redis prints the arguments with %s: each stops at a NUL byte
		}
		if room := 128 - b.Len(); len(s) > room {
			s = s[:room]
		}
		fmt.Fprintf(&b, "'%s' ", s)
	}
	return fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", truncate(name, 128), b.String())
}

// ErrUnknownSubcommand is "ERR unknown subcommand 'x'. Try CLIENT HELP.".
func ErrUnknownSubcommand(cmd, sub string) string {
	return fmt.Sprintf("ERR unknown subcommand '%s'. Try %s HELP.", truncate(sub, 128), strings.ToUpper(cmd))
}

// ErrUnsupportedOption is EXPIRE's "ERR Unsupported option x".
func ErrUnsupportedOption(opt string) string {
	return "ERR Unsupported option " + opt
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ReplyError is an error whose Reply goes to the client verbatim: one line
// "PREFIX message" without "-" and CRLF. Err is the cause, for logs and
// errors.Is; it never reaches the client.
type ReplyError struct {
	Reply string
	Err   error
}

// Reply returns a *ReplyError with the given reply line and no cause.
func Reply(line string) *ReplyError { return &ReplyError{Reply: line} }

func (e *ReplyError) Error() string {
	if e.Err != nil {
		return e.Reply + ": " + e.Err.Error()
	}
	return e.Reply
}

func (e *ReplyError) Unwrap() error { return e.Err }

// ErrNoScript is returned for an EVALSHA of a script nobody loaded.
var ErrNoScript = &ReplyError{Reply: MsgNoScript}

// ErrWrongType is the reply to a command on a key of another type.
var ErrWrongType = &ReplyError{Reply: MsgWrongType}

// IsWrongType reports whether err is the WRONGTYPE reply.
func IsWrongType(err error) bool {
	r, ok := err.(*ReplyError)
	return ok && r.Reply == MsgWrongType
}

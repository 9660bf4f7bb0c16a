package proxy

import (
	"crypto/sha256"
	"crypto/subtle"

	"github.com/lockproxy/lockproxy/backend"
)

// User is a named user clients may authenticate as with AUTH user pass or
// HELLO … AUTH user pass, besides Redis's "default" user (whose password
// is Config.RequirePass). Only the password's SHA-256 is kept, as Redis's
// ACL does with "#<hash>".
type User struct {
	Name           string
	PasswordSHA256 [sha256.Size]byte
	// Admin grants the commands that act beyond one's own locks (FLUSHDB,
	// FLUSHALL). The default user holds every permission, as in Redis.
	Admin bool
}

// authRequired reports whether a new connection starts unauthenticated:
// a password for the default user, or named users (which disable the
// password-less default user, as Redis's "user default off").
func (s *Server) authRequired() bool {
	return s.cfg.RequirePass != "" || len(s.cfg.Users) > 0
}

// authenticate checks user and pass against the configuration, in
// constant time for a given user: the default user with RequirePass, or
// with any password when nothing at all is configured (Redis's "nopass"
// default user); a named user with its password.
func (s *Server) authenticate(user, pass string) bool {
	sum := sha256.Sum256([]byte(pass))
	if user == "default" {
		switch {
		case s.cfg.RequirePass != "":
			want := sha256.Sum256([]byte(s.cfg.RequirePass))
			return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
		default:
			return !s.authRequired()
		}
	}
	for _, u := range s.cfg.Users {
		if u.Name == user {
			return subtle.ConstantTimeCompare(sum[:], u.PasswordSHA256[:]) == 1
		}
	}
	return false
}

// checkPass authenticates the connection as user. As in Redis, a failure
// leaves an already authenticated connection as it was.
func (cl *client) checkPass(user, pass string) backend.Value {
	if !cl.s.authenticate(user, pass) {
		return backend.ErrorValue(backend.MsgWrongPass)
	}
	cl.authed, cl.user = true, user
	cl.setHolder()
	return backend.OKValue
}

// admin reports whether the connection's user holds the admin permission:
// the default user does, as Redis's default user holds every permission.
func (cl *client) admin() bool { return cl.s.admin(cl.user) }

// admin reports whether user ("" is the default user) holds the admin
// permission, over RESP and on the admin port alike.
func (s *Server) admin(user string) bool {
	if user == "" || user == "default" {
		return true
	}
	for _, u := range s.cfg.Users {
		if u.Name == user {
			return u.Admin
		}
	}
	return false
}

// flushRefusal is the reply refusing FLUSHDB or FLUSHALL (name) to this
// connection, or "" when it may run it.
func (cl *client) flushRefusal(name string) string {
	switch {
	case cl.s.cfg.NoFlush:
		return "ERR lockproxy refuses '" + name + "': allow-flush is off in its configuration"
	case !cl.admin():
		return backend.ErrNoPerm(name)
	}
	return ""
}

func cmdAuth(cl *client, args [][]byte) backend.Value {
	switch len(args) {
	case 2:
		if !cl.s.authRequired() {
			return backend.ErrorValue(backend.MsgAuthNoPassword)
		}
		return cl.checkPass("default", string(args[1]))
	case 3:
		return cl.checkPass(string(args[1]), string(args[2]))
	}
	return backend.ErrorValue(backend.MsgSyntax)
}

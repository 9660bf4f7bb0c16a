package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lockproxy/lockproxy/proxy"
)

// userEntry is one named user of the users key: a password, or the hex
// SHA-256 of one (as Redis's ACL "#<hash>", so the file need not hold the
// password itself).
type userEntry struct {
	Name     string `yaml:"name"`
	Password string `yaml:"password"`
	SHA256   string `yaml:"sha256"`
	Admin    bool   `yaml:"admin"`
}

// userList is the users key. In YAML it is a list of {name, password} or
// {name, sha256}; as a flag or environment variable it is comma-separated
// entries in Redis's ACL notation: name>password or name#sha256hex, with
// " +admin" at the end for an admin.
type userList []userEntry

func (l *userList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode { // the flag form in a file
		return l.set(n.Value)
	}
	var entries []userEntry
	if err := n.Decode(&entries); err != nil {
		return err
	}
	*l = entries
	return nil
}

// set parses the flag form. It never fails: validate reports what is
// wrong with the entries, each by key.
func (l *userList) set(v string) error {
	*l = nil
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		admin := false
		if rest, ok := strings.CutSuffix(e, " +admin"); ok {
			e, admin = strings.TrimSpace(rest), true
		}
		i := strings.IndexAny(e, ">#")
		switch {
		case i < 0:
			*l = append(*l, userEntry{Name: e, Admin: admin})
		case e[i] == '>':
			*l = append(*l, userEntry{Name: e[:i], Password: e[i+1:], Admin: admin})
		default:
			*l = append(*l, userEntry{Name: e[:i], SHA256: e[i+1:], Admin: admin})
		}
	}
	return nil
}

// String renders the names only: passwords never reach a log or usage
// line.
func (l userList) String() string {
	return strings.Join(l.names(), ",")
}

func (l userList) names() []string {
	out := make([]string, 0, len(l))
	for _, u := range l {
		out = append(out, u.Name)
	}
	return out
}

func usersField(c *Config) field {
	return field{name: "users", usage: "named users, comma-separated name>password or name#sha256hex, \" +admin\" for an admin (passwords with commas: use the config file)",
		get: func() string { return c.Users.String() }, set: c.Users.set, example: "app>s3cret", yaml: c.Users.UnmarshalYAML}
}

// validate returns the users key's problems.
func (l userList) validate(add func(key, problem, fix string)) {
	var seen []string
	for _, u := range l {
		switch {
		case u.Name == "":
			add("users", "a user has no name", "give every user a name")
			continue
		case strings.ContainsAny(u.Name, " \t\r\n>#,"):
			add("users", fmt.Sprintf("user name %q has a space or one of > # ,", u.Name), "use letters, digits and -_.:@")
		case u.Name == "default":
			add("users", `"default" is the requirepass user`, "set its password with requirepass")
		case slices.Contains(seen, u.Name):
			add("users", fmt.Sprintf("user %q is listed twice", u.Name), "keep one entry per user")
		}
		seen = append(seen, u.Name)
		switch {
		case u.Password != "" && u.SHA256 != "":
			add("users", fmt.Sprintf("user %q has both password and sha256", u.Name), "keep one")
		case u.Password == "" && u.SHA256 == "":
			add("users", fmt.Sprintf("user %q has no password", u.Name), "set password, or sha256 to the hex SHA-256 of one: printf %s PASS | sha256sum")
		case u.SHA256 != "":
			if b, err := hex.DecodeString(u.SHA256); err != nil || len(b) != sha256.Size {
				add("users", fmt.Sprintf("user %q: sha256 is not 64 hex digits", u.Name), "printf %s PASS | sha256sum gives it")
			}
		}
	}
}

// proxyUsers converts validated entries for proxy.Config.
func (l userList) proxyUsers() []proxy.User {
	var out []proxy.User
	for _, u := range l {
		pu := proxy.User{Name: u.Name, Admin: u.Admin}
		if u.SHA256 != "" {
			b, _ := hex.DecodeString(u.SHA256)
			copy(pu.PasswordSHA256[:], b)
		} else {
			pu.PasswordSHA256 = sha256.Sum256([]byte(u.Password))
		}
		out = append(out, pu)
	}
	return out
}

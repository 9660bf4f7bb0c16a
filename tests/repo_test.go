package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// The repository checks keep what CONTRIBUTING.md promises: no conflict
// markers in tracked files, a README within its budget, relative links in
// the documents that lead somewhere, backends that never depend on the
// front end (docs/architecture.md, "The dependency rule"), and no function
// of the product's code over maxFuncLines lines.

const (
	module         = "github.com/lockproxy/lockproxy"
	readmeMaxLines = 250
)

// backendPackages are the packages below the front end: none of them may
// import proxy, directly or through another package.
var backendPackages = []string{
	"./memory", "./quorum", "./pgbridge", "./migrate", "./luascripts",
	"./backend/...", "./resp", "./keycmd",
}

// repoRoot returns the root of the git checkout the tests run in.
func repoRoot(t *testing.T) string {
	t.Helper()
	git := testsrv.Need(t, "git")
	out, err := exec.CommandContext(t.Context(), git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git rev-parse --show-toplevel: %v (the checks need a git checkout)", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// conflictMarkers are the lines git writes around a conflict. They are
// built here rather than written out so this file does not match itself.
var conflictMarkers = []string{strings.Repeat("<", 7) + " ", strings.Repeat(">", 7) + " "}

// findConflictMarkers returns "line N: text" for every line of data that
// starts with a conflict marker.
func findConflictMarkers(data []byte) []string {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for n := 1; sc.Scan(); n++ {
		for _, m := range conflictMarkers {
			if strings.HasPrefix(sc.Text(), m) {
				found = append(found, fmt.Sprintf("line %d: %.60s", n, sc.Text()))
			}
		}
	}
	return found
}

func TestRepoConflictMarkers(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
			continue // binary, as git decides
		}
		for _, f := range findConflictMarkers(data) {
			t.Errorf("%s %s: a merge conflict marker; resolve the conflict", name, f)
		}
	}
}

func TestRepoReadmeBudget(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n > readmeMaxLines {
		t.Errorf("README.md has %d lines; want at most %d (move details to docs/)", n, readmeMaxLines)
	}
}

var (
	fencedCode = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdHeading  = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// stripCode removes code blocks and code spans, whose brackets are not links.
func stripCode(md string) string {
	return inlineCode.ReplaceAllString(fencedCode.ReplaceAllString(md, ""), "")
}

// relativeLinks returns the link targets of md that are not URLs.
func relativeLinks(md string) []string {
	var links []string
	for _, m := range mdLink.FindAllStringSubmatch(stripCode(md), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		links = append(links, target)
	}
	return links
}

// anchors returns the fragment ids GitHub gives md's headings (lower case,
// punctuation dropped, spaces as dashes, repeats numbered) and its explicit
// <a id> anchors.
func anchors(md string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(fencedCode.ReplaceAllString(md, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(md, -1) {
		ids[m[1]] = true
	}
	return ids
}

// brokenLinks returns a problem for every relative link of the document at
// path (inside root) whose file, or whose anchor in a markdown file, does
// not exist.
func brokenLinks(root, path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, link := range relativeLinks(string(data)) {
		file, anchor, _ := strings.Cut(link, "#")
		target := path
		if file != "" {
			target = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
		}
		if rel, err := filepath.Rel(root, target); err != nil || strings.HasPrefix(rel, "..") {
			problems = append(problems, fmt.Sprintf("%s: outside the repository", link))
			continue
		}
		if _, err := os.Stat(target); err != nil {
			problems = append(problems, fmt.Sprintf("%s: no such file", link))
			continue
		}
		if anchor == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		md, err := os.ReadFile(target)
		if err != nil {
			return nil, err
		}
		if !anchors(string(md))[anchor] {
			problems = append(problems, fmt.Sprintf("%s: no heading or anchor #%s in %s", link, anchor, filepath.Base(target)))
		}
	}
	return problems, nil
}

func TestRepoRelativeLinks(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md")}, docs...)
	for _, f := range files {
		problems, err := brokenLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, p := range problems {
			t.Errorf("%s: broken link %s", rel, p)
		}
	}
}

func TestRepoBackendsDoNotImportProxy(t *testing.T) {
	t.Parallel()
	goTool := testsrv.Need(t, "go")
	cmd := exec.CommandContext(t.Context(), goTool, append([]string{"list", "-f",
		`{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}, backendPackages...)...)
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < len(backendPackages) {
		t.Fatalf("go list listed %d packages; want at least %d:\n%s", len(lines), len(backendPackages), out)
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		for _, dep := range fields[1:] {
			if dep == module+"/proxy" || strings.HasPrefix(dep, module+"/proxy/") {
				t.Errorf("%s depends on %s: backends must not import the front end (docs/architecture.md)", fields[0], dep)
			}
		}
	}
}

// maxFuncLines bounds a function of the product's code (tests excluded):
// one that grows past it does several things and is split.
const maxFuncLines = 100

// TestRepoFunctionLength keeps every function of the product's code (the
// tracked .go files but tests) within maxFuncLines lines.
func TestRepoFunctionLength(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files", "-z", "*.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, name), nil, parser.SkipObjectResolution)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines; split it (at most %d)", name, fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}

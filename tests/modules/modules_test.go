// Package modules_test keeps the repository's module boundaries where
// docs/modules.md draws them: go.work uses every module, and a module that
// users import requires only the client libraries it wraps. Nothing that only
// a test, the command or the benchmark needs reaches a user's module graph.
package modules_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../.."

// libraries are the modules users import, by directory, with the modules
// each may require directly, besides this repository's own.
var libraries = map[string][]string{
	".":                     {"github.com/jackc/pgx/v5", "github.com/go-sql-driver/mysql"},
	"store/sqlstore/sqlite": {"modernc.org/sqlite"},
	"inboxtest/sqlitetest":  nil,
	"broker/brokertest":     {"github.com/jackc/pgx/v5"},
	// kfake runs the adapter's in-package tests. It is franz-go's own, and
	// it asks for no newer franz-go than the adapter does.
	"broker/kafka":    {"github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg", "github.com/twmb/franz-go/pkg/kfake"},
	"broker/natsjs":   {"github.com/nats-io/nats.go"},
	"broker/rabbitmq": {"github.com/rabbitmq/amqp091-go"},
	"broker/sqs":      {"github.com/aws/aws-sdk-go-v2", "github.com/aws/aws-sdk-go-v2/service/sqs", "github.com/aws/smithy-go"},
	// The SDK runs the package's tests; it is released with the API, at
	// the same version.
	"otelinbox": {"go.opentelemetry.io/otel", "go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/trace",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/sdk/metric"},
}

// tools are the modules nobody imports: the command, the examples, the
// benchmark and the tests that need emulators and embedded servers.
var tools = []string{"bench", "cmd/inbox", "examples", "tests"}

type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path string }
	}
}

// readGoMod reads dir/go.mod through the go command, which parses it as
// every other go command does.
func readGoMod(t *testing.T, dir string) goMod {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", filepath.Join(repoRoot, dir, "go.mod")).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s/go.mod: %v", dir, err)
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// moduleDirs lists the directories under the repository's root that hold a
// go.mod, relative to it.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// TestWorkspaceUsesEveryModule: a module that go.work leaves out is one that
// `go test github.com/inboxkit/inbox/...`, and so CI, never runs.
func TestWorkspaceUsesEveryModule(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "work", "edit", "-json", filepath.Join(repoRoot, "go.work")).Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, u := range work.Use {
		used = append(used, strings.TrimPrefix(filepath.ToSlash(filepath.Clean(u.DiskPath)), "./"))
	}
	slices.Sort(used)
	if got := moduleDirs(t); !slices.Equal(got, used) {
		t.Errorf("go.work uses %q; the modules are %q", used, got)
	}
	var known []string
	for dir := range libraries {
		known = append(known, dir)
	}
	known = append(known, tools...)
	slices.Sort(known)
	if !slices.Equal(known, used) {
		t.Errorf("modules %q; this test knows %q: say in libraries or tools what a new one is", used, known)
	}
}

// TestLibraryRequirements: a library module requires directly only the
// client libraries it wraps. A test of it that needs an emulator or an
// embedded server lives in the tests module instead.
func TestLibraryRequirements(t *testing.T) {
	t.Parallel()
	for dir, allowed := range libraries {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			m := readGoMod(t, dir)
			for _, r := range m.Require {
				if r.Indirect || strings.HasPrefix(r.Path, "github.com/inboxkit/inbox") {
					continue
				}
				if !slices.Contains(allowed, r.Path) {
					t.Errorf("%s/go.mod requires %s %s; a library module may require only %q", dir, r.Path, r.Version, allowed)
				}
			}
		})
	}
}

// TestReplacesReachOwnModules: each module replaces every module of this
// repository that it requires with its directory, so that it builds without
// go.work (`GOWORK=off`, as `go mod tidy` does) on the code next to it.
func TestReplacesReachOwnModules(t *testing.T) {
	t.Parallel()
	for _, dir := range moduleDirs(t) {
		m := readGoMod(t, dir)
		replaced := map[string]string{}
		for _, r := range m.Replace {
			replaced[r.Old.Path] = r.New.Path
		}
		for _, r := range m.Require {
			if !strings.HasPrefix(r.Path, "github.com/inboxkit/inbox") {
				continue
			}
			target, ok := replaced[r.Path]
			if !ok {
				t.Errorf("%s/go.mod requires %s without a replace", dir, r.Path)
				continue
			}
			sub := strings.TrimPrefix(strings.TrimPrefix(r.Path, "github.com/inboxkit/inbox"), "/")
			if sub == "" {
				sub = "."
			}
			want, err := filepath.Rel(filepath.Join(repoRoot, dir), filepath.Join(repoRoot, sub))
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Clean(target) != want {
				t.Errorf("%s/go.mod replaces %s with %s, want %s", dir, r.Path, target, want)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, dir, target, "go.mod")); err != nil {
				t.Errorf("%s/go.mod replaces %s with %s: %v", dir, r.Path, target, err)
			}
		}
	}
}

package gitserver

import (
	"net/http/httptest"
	"testing"
)

// Serve creates the bare repository name in a temporary root, serves the
// root over smart HTTP for the rest of the test, and returns the
// repository's URL and directory. For tests of other packages.
func Serve(t testing.TB, name string) (url, bareDir string) {
	t.Helper()
	root := t.TempDir()
	bareDir, err := CreateRepo(root, name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Handler(root)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + PathPrefix + "/" + name + ".git", bareDir
}

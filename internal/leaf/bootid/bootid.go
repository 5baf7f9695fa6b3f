package bootid

import (
	"errors"
	"os"
	"strings"
)

// File is where Linux exposes the boot ID.
const File = "/proc/sys/kernel/random/boot_id"

// ErrEmpty is returned by [Read] when the source yields only white space.
var ErrEmpty = errors.New("bootid: empty boot ID")

// Read returns the boot ID that source yields, without surrounding white
// space. A nil source reads [File]. Its error is source's, or [ErrEmpty];
// callers wrap it with their own sentinel, so the component that could not
// start is named.
func Read(source func() (string, error)) (string, error) {
	if source == nil {
		source = readFile
	}
	id, err := source()
	if err != nil {
		return "", err
	}
	id = strings.TrimSpace(id)
	if id == "" {
		return "", ErrEmpty
	}
	return id, nil
}

func readFile() (string, error) {
	data, err := os.ReadFile(File)
	return string(data), err
}

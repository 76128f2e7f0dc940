package replay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/redact"
)

const (
	ManifestName   = "manifest.json"           // the file of a snapshot directory saying which file holds which collection
	ManifestFormat = "scorerefresh-snapshot/1" // the manifest's layout
)

// Manifest describes a snapshot directory, written by Snapshot and Generate.
type Manifest struct {
	Format      string         `json:"format"`
	CreatedAt   time.Time      `json:"createdAt"`
	Origin      string         `json:"origin"`                // what was snapshotted, or how it was generated
	Database    string         `json:"database,omitempty"`    // the database snapshotted
	Rules       string         `json:"rules,omitempty"`       // the rules file whose sources were taken
	Consistency string         `json:"consistency,omitempty"` // what the snapshot guarantees
	Files       []ManifestFile `json:"files"`
}

// ManifestFile is one collection's file.
type ManifestFile struct {
	File       string `json:"file"` // relative to the directory
	Collection string `json:"collection"`
	Queue      bool   `json:"queue,omitempty"` // the queue: replayed into QUEUE_COLLECTION
	Documents  int64  `json:"documents"`
	Bytes      int64  `json:"bytes"` // on disk
}

// InputFile is one file to load and where it goes.
type InputFile struct {
	Path       string
	Collection string // source collection name; ignored for the queue
	Queue      bool
}

// inputExtensions are the file names a directory replay picks up, as
// mongoexport users name them.
var inputExtensions = []string{".json", ".jsonl", ".ndjson"}

// ResolveInput lists the files of --in, and the manifest that lists them
// (nil when there is none). A file is the queue. A directory is read through
// its manifest if it has one; otherwise each *.json, *.jsonl or *.ndjson file
// (optionally .gz) is the collection its name says, and the one named after
// queue is the queue.
func ResolveInput(path, queue string) (files []InputFile, m *Manifest, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.IsDir() {
		return []InputFile{{Path: path, Collection: queue, Queue: true}}, nil, nil
	}
	if m, err = ReadManifest(path); err == nil {
		for _, f := range m.Files {
			files = append(files, InputFile{Path: filepath.Join(path, f.File), Collection: f.Collection, Queue: f.Queue})
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	} else {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range ents {
			name := strings.TrimSuffix(e.Name(), ".gz")
			ext := filepath.Ext(name)
			if coll := strings.TrimSuffix(name, ext); !e.IsDir() && slices.Contains(inputExtensions, ext) {
				files = append(files, InputFile{Path: filepath.Join(path, e.Name()), Collection: coll, Queue: coll == queue})
			}
		}
	}
	n := 0
	for _, f := range files {
		if f.Queue {
			n++
		}
	}
	if n != 1 {
		return files, m, fmt.Errorf("%s: %d files hold the queue, want exactly one (a %s naming it, or a file named after QUEUE_COLLECTION such as score_events.json)", path, n, ManifestName)
	}
	return files, m, nil
}

// ReadManifest reads dir's manifest.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	var m Manifest
	if err := readJSON(path, &m); err != nil {
		return nil, err
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("%s: format %q, this build reads %q", path, m.Format, ManifestFormat)
	}
	return &m, nil
}

// writeManifest writes m into dir. The origin is redacted here, whatever
// the caller passed: a manifest travels with the data it describes.
func writeManifest(dir string, m *Manifest) error {
	m.Origin = redact.String(m.Origin)
	return writeJSON(filepath.Join(dir, ManifestName), m)
}

package kubecheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// scheme knows the API groups deploy/kubernetes uses; an object of any
// other kind does not decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML into the scheme's types, failing on a field the
// type does not have and on a field given twice.
var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})

// Object is one decoded object and where it came from.
type Object struct {
	File string // base name in the directory
	Obj  runtime.Object
}

// Decode decodes one YAML document strictly into its API type.
func Decode(doc []byte) (runtime.Object, error) {
	obj, _, err := strict.Decode(doc, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// Load decodes every document of every *.yaml file in dir, in file
// order; a document holding only comments is skipped.
func Load(dir string) ([]Object, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	sort.Strings(files)
	var out []Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if onlyComments(doc) {
				continue
			}
			obj, err := Decode(doc)
			if err != nil {
				return nil, fmt.Errorf("%s, document %d: %w", filepath.Base(f), i+1, err)
			}
			out = append(out, Object{File: filepath.Base(f), Obj: obj})
		}
	}
	return out, nil
}

// onlyComments reports whether a YAML document holds nothing but
// comments and blank lines.
func onlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

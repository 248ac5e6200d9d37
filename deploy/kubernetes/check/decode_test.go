package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository's root: this package is deploy/kubernetes/check.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/fanout/fanout\n")) {
		t.Fatalf("%s is not the fanout repository's root (go.mod: %v)", root, err)
	}
	return root
}

// manifestsDir is deploy/kubernetes.
func manifestsDir(t testing.TB) string {
	return filepath.Join(repoRoot(t), "deploy", "kubernetes")
}

// Minimal cert-manager types: the fields of cert-manager.io/v1 Issuer and Certificate
// that the manifests use, and a few neighbours. cert-manager's own module is the whole
// of cert-manager (controllers and all), too much to fetch for two structs; a field
// used in the manifests but missing here fails the strict decoding, so add it here
// when you use it (and check its name in cert-manager's API reference).
type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct {
			CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
		} `json:"selfSigned,omitempty"`
		CA *struct {
			SecretName            string   `json:"secretName"`
			CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
			OCSPServers           []string `json:"ocspServers,omitempty"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA        bool             `json:"isCA,omitempty"`
		CommonName  string           `json:"commonName,omitempty"`
		DNSNames    []string         `json:"dnsNames,omitempty"`
		SecretName  string           `json:"secretName"`
		Duration    *metav1.Duration `json:"duration,omitempty"`
		RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
		Usages      []string         `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// types maps apiVersion/kind to the Go type a document of that kind decodes into. A
// kind not listed here fails: add its type before using it in a manifest.
var types = map[string]func() any{
	"v1/ServiceAccount":                             func() any { return &corev1.ServiceAccount{} },
	"v1/Service":                                    func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                            func() any { return &appsv1.Deployment{} },
	"networking.k8s.io/v1/NetworkPolicy":            func() any { return &networkingv1.NetworkPolicy{} },
	"policy/v1/PodDisruptionBudget":                 func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/PodMonitor":           func() any { return &monitoringv1.PodMonitor{} },
	"cert-manager.io/v1/Issuer":                     func() any { return &cmIssuer{} },
	"cert-manager.io/v1/Certificate":                func() any { return &cmCertificate{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &kusttypes.Kustomization{} },
}

// document is one YAML document, decoded.
type document struct {
	where     string // file:index, for messages
	typeMeta  metav1.TypeMeta
	name      string
	obj       any
	rawJSON   []byte
	isEmpty   bool // only comments
	decodeErr error
}

// decodeStrict decodes one YAML document into obj the way the API server's strict
// field validation does: YAML to JSON refusing duplicate keys, then JSON into the
// type with case-sensitive field names, refusing unknown and duplicate fields (and,
// as any decoding, values of the wrong type).
func decodeStrict(raw []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// splitDocuments splits a YAML stream at its `---` lines.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
}

// decodeDocuments decodes every document of a YAML stream; where names the stream.
func decodeDocuments(where string, data []byte) ([]document, error) {
	raws, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var docs []document
	for i, raw := range raws {
		d := document{where: fmt.Sprintf("%s, document %d", where, i+1)}
		j, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			d.decodeErr = err
			docs = append(docs, d)
			continue
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
			d.isEmpty = true
			docs = append(docs, d)
			continue
		}
		d.rawJSON = j
		var meta struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			d.decodeErr = err
			docs = append(docs, d)
			continue
		}
		d.typeMeta, d.name = meta.TypeMeta, meta.Metadata.Name
		if d.name != "" {
			d.where += " (" + d.typeMeta.Kind + " " + d.name + ")"
		}
		newObj, ok := types[d.typeMeta.APIVersion+"/"+d.typeMeta.Kind]
		if !ok {
			d.decodeErr = fmt.Errorf("apiVersion %q kind %q: no Go type for it in this check (add one to `types` in decode_test.go)", d.typeMeta.APIVersion, d.typeMeta.Kind)
			docs = append(docs, d)
			continue
		}
		d.obj = newObj()
		d.decodeErr = decodeStrict(raw, d.obj)
		docs = append(docs, d)
	}
	return docs, nil
}

// yamlFiles lists every YAML file under deploy/kubernetes, this module's excepted.
func yamlFiles(t testing.TB) []string {
	t.Helper()
	dir := manifestsDir(t)
	var files []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && path == filepath.Join(dir, "check") {
			return filepath.SkipDir
		}
		if !e.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no YAML file under %s", dir)
	}
	sort.Strings(files)
	return files
}

// TestEveryDocumentDecodesStrictly decodes every document of every YAML file under
// deploy/kubernetes (resources, patches and kustomizations alike) into its API type.
func TestEveryDocumentDecodesStrictly(t *testing.T) {
	dir := manifestsDir(t)
	for _, f := range yamlFiles(t) {
		rel, _ := filepath.Rel(dir, f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := decodeDocuments(rel, data)
		if err != nil {
			t.Error(err)
			continue
		}
		n := 0
		for _, d := range docs {
			if d.isEmpty {
				continue
			}
			n++
			if d.decodeErr != nil {
				t.Errorf("%s: %v", d.where, d.decodeErr)
			}
		}
		if n == 0 {
			t.Errorf("%s: no document", rel)
		}
		t.Logf("%s: %d document(s)", rel, n)
	}
}

// TestStrictDecodingRefuses shows that the decoding above is strict: each of these
// mistakes fails it.
func TestStrictDecodingRefuses(t *testing.T) {
	bad := map[string]string{
		"unknown field":               "apiVersion: v1\nkind: Service\nspec:\n  clusterIp: None\n",
		"field in the wrong case":     "apiVersion: v1\nkind: Service\nspec:\n  ClusterIP: None\n",
		"wrong type":                  "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: three\n",
		"duplicate key":               "apiVersion: v1\nkind: Service\nspec:\n  clusterIP: None\n  clusterIP: None\n",
		"probe field on a container":  "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          restartPolicy: Always\n          grpc: {port: 1}\n",
		"unknown kind":                "apiVersion: v1\nkind: Pod\n",
		"unknown PodMonitor field":    "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nspec:\n  podMetricsEndpoints:\n    - targetport: admin\n",
		"unknown Kustomization field": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n",
		"unknown Certificate field":   "apiVersion: cert-manager.io/v1\nkind: Certificate\nspec:\n  dnsName: [a]\n",
	}
	for name, y := range bad {
		docs, err := decodeDocuments(name, []byte(y))
		if err != nil {
			continue
		}
		if len(docs) != 1 || docs[0].decodeErr == nil {
			t.Errorf("%s: decoded without an error:\n%s", name, y)
		}
	}
	ok := "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: None\n"
	if docs, err := decodeDocuments("ok", []byte(ok)); err != nil || len(docs) != 1 || docs[0].decodeErr != nil {
		t.Errorf("a valid Service failed: %v %+v", err, docs)
	}
}

// kustomizationDirs lists the directories under deploy/kubernetes that hold a
// kustomization.yaml.
func kustomizationDirs(t testing.TB) []string {
	var dirs []string
	for _, f := range yamlFiles(t) {
		if filepath.Base(f) == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no kustomization.yaml under deploy/kubernetes")
	}
	return dirs
}

// render runs kustomize on dir, as `kubectl apply -k dir` does before applying, and
// decodes its output strictly.
func render(t testing.TB, dir string) []document {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(manifestsDir(t), dir)
	docs, err := decodeDocuments("kustomize build "+rel, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if d.decodeErr != nil {
			t.Errorf("%s: %v", d.where, d.decodeErr)
		}
	}
	return docs
}

// TestKustomizationsRender checks that each kustomization names every YAML file of its
// directory (a file left out would never be applied) and renders, and that what it
// renders decodes strictly.
func TestKustomizationsRender(t *testing.T) {
	for _, dir := range kustomizationDirs(t) {
		rel, _ := filepath.Rel(manifestsDir(t), dir)
		t.Run(rel, func(t *testing.T) {
			var k kusttypes.Kustomization
			data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := decodeStrict(data, &k); err != nil {
				t.Fatal(err)
			}
			named := slices.Clone(k.Resources)
			for _, p := range k.Patches {
				named = append(named, p.Path)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				n := e.Name()
				if e.IsDir() || n == "kustomization.yaml" || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
					continue
				}
				if !slices.Contains(named, n) {
					t.Errorf("%s is not in %s/kustomization.yaml (resources or patches): `kubectl apply -k` would leave it out", n, rel)
				}
			}
			docs := render(t, dir)
			t.Logf("renders %d objects", len(docs))
		})
	}
}

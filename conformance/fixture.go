package conformance

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The fixture file: content only the host's author knows (a tool that
// streams, an environment and a valid action, a process to run, an MCP
// server). Each check that needs a key skips without it, never fails.
// fixture.schema.json is its schema; [LoadFixture] refuses a file that does
// not follow it, so a misspelt key fails loudly instead of skipping.

//go:embed fixture.schema.json
var fixtureSchema []byte

//go:embed baseline.schema.json
var baselineSchema []byte

// FixtureSchema returns the JSON Schema of the fixture file.
func FixtureSchema() []byte { return bytes.Clone(fixtureSchema) }

// Fixture is the host content the kit's checks use; see fixture.schema.json
// for what each key is for.
type Fixture struct {
	Schema      string           `json:"$schema,omitempty"`
	Description string           `json:"description,omitempty"`
	Tools       *ToolsFixture    `json:"tools,omitempty"`
	Toolkits    *ToolkitsFixture `json:"toolkits,omitempty"`
	Env         *EnvFixture      `json:"env,omitempty"`
	Proc        *ProcFixture     `json:"proc,omitempty"`
	Skills      *SkillsFixture   `json:"skills,omitempty"`
	Chains      *ChainsFixture   `json:"chains,omitempty"`
	MCP         *MCPFixture      `json:"mcp,omitempty"`
	Limits      *LimitsFixture   `json:"limits,omitempty"`
}

// ToolCall is a tool call of the fixture; Data, when set, is what the
// result's data must hold (see [holds]).
type ToolCall struct {
	ToolName  string         `json:"tool_name"`
	Arguments map[string]any `json:"arguments,omitempty"`
	Data      any            `json:"data,omitempty"`
}

type ToolsFixture struct {
	Call      *ToolCall `json:"call,omitempty"`
	Streaming *ToolCall `json:"streaming,omitempty"`
	Slow      *ToolCall `json:"slow,omitempty"`
}

type ToolkitsFixture struct {
	Configure *ToolkitConfig `json:"configure,omitempty"`
}

type ToolkitConfig struct {
	ToolkitName string         `json:"toolkit_name"`
	Config      map[string]any `json:"config"`
}

type EnvFixture struct {
	Episode  *EpisodeFixture `json:"episode,omitempty"`
	DataPart *DataPart       `json:"data_part,omitempty"`
}

type EpisodeFixture struct {
	EnvName string         `json:"env_name"`
	Action  any            `json:"action"`
	Seed    *int64         `json:"seed,omitempty"`
	Options map[string]any `json:"options,omitempty"`
}

type DataPart struct {
	Path   string `json:"path"`
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

type ProcFixture struct {
	Echo []string `json:"echo,omitempty"`
	Long []string `json:"long,omitempty"`
}

type SkillsFixture struct {
	Call *SkillCall `json:"call,omitempty"`
}

type SkillCall struct {
	Name      string `json:"name"`
	Version   string `json:"version,omitempty"`
	Arguments any    `json:"arguments,omitempty"`
	Data      any    `json:"data,omitempty"`
}

type ChainsFixture struct {
	Run *ChainRun `json:"run,omitempty"`
}

type ChainRun struct {
	Chain       map[string]any `json:"chain"`
	Input       any            `json:"input,omitempty"`
	FinalOutput any            `json:"final_output,omitempty"`
}

type MCPFixture struct {
	ServerID    string     `json:"server_id"`
	ResourceURI string     `json:"resource_uri,omitempty"`
	Prompt      *MCPPrompt `json:"prompt,omitempty"`
	Tool        *ToolCall  `json:"tool,omitempty"`
}

type MCPPrompt struct {
	Name      string            `json:"name"`
	Arguments map[string]string `json:"arguments,omitempty"`
}

type LimitsFixture struct {
	MaxMessageBytes int64 `json:"max_message_bytes,omitempty"`
}

// ParseFixture reads a fixture file's content: it must validate against
// fixture.schema.json.
func ParseFixture(b []byte) (*Fixture, error) {
	if err := validateDoc(fixtureSchema, b); err != nil {
		return nil, fmt.Errorf("conformance: fixture: %w", err)
	}
	var f Fixture
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("conformance: fixture: %w", err)
	}
	return &f, nil
}

// LoadFixture reads the fixture file at path.
func LoadFixture(path string) (*Fixture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := ParseFixture(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Baseline lists the checks a host is known to fail. The kit reports a
// listed failure as expected (status xfail), which does not make the run
// fail, and a listed check that passes with a note, so the entry can go.
type Baseline struct {
	Schema           string            `json:"$schema,omitempty"`
	Description      string            `json:"description,omitempty"`
	ExpectedFailures []ExpectedFailure `json:"expected_failures"`
}

type ExpectedFailure struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// ParseBaseline reads a baseline file's content: it must validate against
// baseline.schema.json and name only checks of the kit, each once.
func ParseBaseline(b []byte) (*Baseline, error) {
	if err := validateDoc(baselineSchema, b); err != nil {
		return nil, fmt.Errorf("conformance: baseline: %w", err)
	}
	var bl Baseline
	if err := json.Unmarshal(b, &bl); err != nil {
		return nil, fmt.Errorf("conformance: baseline: %w", err)
	}
	seen := map[string]bool{}
	var unknown []string
	for _, e := range bl.ExpectedFailures {
		if _, ok := checkInfo(e.Check); !ok {
			unknown = append(unknown, e.Check)
		}
		if seen[e.Check] {
			return nil, fmt.Errorf("conformance: baseline: %s listed twice", e.Check)
		}
		seen[e.Check] = true
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("conformance: baseline: no such check: %s (aep conformance --list names them)", strings.Join(unknown, ", "))
	}
	return &bl, nil
}

// LoadBaseline reads the baseline file at path.
func LoadBaseline(path string) (*Baseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	bl, err := ParseBaseline(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return bl, nil
}

func (b *Baseline) reason(check string) (string, bool) {
	if b == nil {
		return "", false
	}
	for _, e := range b.ExpectedFailures {
		if e.Check == check {
			return e.Reason, true
		}
	}
	return "", false
}

// validateDoc validates doc against schema (both JSON texts).
func validateDoc(schema, doc []byte) error {
	s, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return err
	}
	id, _ := s.(map[string]any)["$id"].(string)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noNetwork{})
	if err := c.AddResource(id, s); err != nil {
		return err
	}
	sch, err := c.Compile(id)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	if err := sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return errors.New(describe(ve))
		}
		return err
	}
	return nil
}

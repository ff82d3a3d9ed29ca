import Foundation
import Prometheus
import Testing


package enum YAMLFile {
    package static func load(_ relativePath: String) throws -> [Any] {
        let result = try VenvPython.run(
            ["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))", repositoryRoot.appendingPathComponent(relativePath).path],
            purpose: "the test reads YAML with the venv's PyYAML")
        try #require(result.status == 0, "\(relativePath) is not valid YAML: \(result.errors)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [Any])
    }
}

/// JSON Schema validation by the venv's `jsonschema` (scripts/install.sh): an independent implementation of the
/// standard. Returns one message per instance that does not validate.
package enum JSONSchemaCheck {
    package static func validate(_ instances: [String], against schemaPath: String) throws -> [String] {
        let script = """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            validator = jsonschema.Draft202012Validator(schema)
            for index, line in enumerate(sys.stdin):
                for error in validator.iter_errors(json.loads(line)):
                    print(f"instance {index}: {error.message} at {list(error.absolute_path)}")
                    break
            """
        let result = try VenvPython.run(
            ["-c", script, repositoryRoot.appendingPathComponent(schemaPath).path], input: instances.map { $0 + "\n" }.joined(),
            purpose: "the test validates with the venv's jsonschema")
        try #require(result.status == 0, "the validator failed: \(result.output)\(result.errors)")
        return result.output.split(separator: "\n").map(String.init)
    }
}

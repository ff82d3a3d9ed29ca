import Foundation
import Prometheus
import Testing


package enum YAMLFile {
    package static func load(_ relativePath: String) throws -> [Any] {
        let python = repositoryRoot.appendingPathComponent(".venv/bin/python3").path
        try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install.sh: the test reads YAML with the venv's PyYAML")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))", repositoryRoot.appendingPathComponent(relativePath).path]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "\(relativePath) is not valid YAML")
        return try #require(try JSONSerialization.jsonObject(with: data) as? [Any])
    }
}

/// JSON Schema validation by the venv's `jsonschema` (scripts/install.sh): an independent implementation of the
/// standard. Returns one message per instance that does not validate.
package enum JSONSchemaCheck {
    package static func validate(_ instances: [String], against schemaPath: String) throws -> [String] {
        let python = repositoryRoot.appendingPathComponent(".venv/bin/python3").path
        try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install.sh: the test validates with the venv's jsonschema")
        let script = """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            validator = jsonschema.Draft202012Validator(schema)
            for index, line in enumerate(sys.stdin):
                for error in validator.iter_errors(json.loads(line)):
                    print(f"instance {index}: {error.message} at {list(error.absolute_path)}")
                    break
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-c", script, repositoryRoot.appendingPathComponent(schemaPath).path]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data(instances.map { $0 + "\n" }.joined().utf8))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "the validator failed: \(String(decoding: data, as: UTF8.self))")
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }
}

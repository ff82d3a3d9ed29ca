@main struct VerifyBench { static func main() {} }

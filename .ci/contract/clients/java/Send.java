// The Java client quicktype generates from the contract (package aep, one
// class per def, Jackson annotations), compiled by Debian's JDK against
// Debian's Jackson 2.14 (libjackson2-databind-java), sends one line of
// every message type an agent sends to a real host through the single
// exchange (POST /send with Accept: application/json, over the JDK's own
// java.net.http: no WebSocket or other library). Each line is decoded with
// the generated class of its message and sent as Jackson writes it again.
//
// The ObjectMapper is the one docs/contract.md gives: quicktype's
// Converter settings (unknown fields ignored, for what a later host adds)
// and NON_NULL inclusion, without which Jackson writes every absent field
// as null and the host refuses the line. quicktype's Converter.java is not
// compiled: its ToJsonString methods declare JsonProcessingException where
// Debian's Jackson declares IOException too.
//
// A reply that refuses a line as malformed (parse_error,
// schema_violation, version_mismatch), or a refused handshake, fails the
// run.
//
// usage: java -cp … Send <http://host:port> <requests.json> <classes.tsv>

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

public class Send {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Send <http://host:port> <requests.json> <classes.tsv>");
            System.exit(2);
        }
        String base = args[0];
        ObjectMapper tree = new ObjectMapper();
        JsonNode reqs = tree.readTree(Files.readString(Path.of(args[1])));
        Map<String, Class<?>> classes = new HashMap<>();
        for (String row : Files.readAllLines(Path.of(args[2]))) {
            String[] kv = row.split("\t");
            if (kv.length == 2) classes.put(kv[0], Class.forName("aep." + kv[1]));
        }

        ObjectMapper mapper = new ObjectMapper();
        mapper.configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
        mapper.setSerializationInclusion(JsonInclude.Include.NON_NULL);

        HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        HttpResponse<String> created = http.send(HttpRequest.newBuilder(URI.create(base + "/session"))
                .POST(HttpRequest.BodyPublishers.noBody()).build(), HttpResponse.BodyHandlers.ofString());
        String session = tree.readTree(created.body()).path("session_id").asText();
        if (session.isEmpty()) {
            System.err.println("java client: POST /session: " + created.statusCode() + " " + created.body());
            System.exit(1);
        }

        Set<String> malformed = Set.of("parse_error", "schema_violation", "version_mismatch");
        Set<String> types = new TreeSet<>();
        int bad = 0;
        for (JsonNode r : reqs) {
            String type = r.path("type").asText(), def = r.path("def").asText(), name = r.path("name").asText(), line = r.path("line").asText();
            types.add(type);
            Class<?> cls = classes.get(def);
            if (cls == null) {
                System.err.println("java client: no generated class for " + def);
                System.exit(1);
            }
            String body;
            try {
                body = mapper.writeValueAsString(mapper.readValue(line, cls));
            } catch (Exception e) {
                bad++;
                System.err.println("FAIL " + type + " " + name + ": the generated class does not round-trip the line: " + e.getMessage());
                continue;
            }
            HttpResponse<String> resp = http.send(HttpRequest.newBuilder(URI.create(base + "/send"))
                    .header("X-Session-Id", session)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
            if (resp.statusCode() == 202) {
                System.out.printf("%-32s %-24s 202 (a notification)%n", type, name);
                continue;
            }
            JsonNode m = resp.body().isEmpty() ? tree.nullNode() : tree.readTree(resp.body());
            String mtype = m.path("type").asText(), code = m.path("code").asText();
            if (resp.statusCode() != 200 || mtype.isEmpty()) {
                bad++;
                System.err.println("FAIL " + type + " " + name + ": HTTP " + resp.statusCode() + " " + resp.body());
            } else if ((mtype.equals("error") && malformed.contains(code)) || (mtype.equals("handshake/resp") && !m.path("ok").asBoolean(false))) {
                bad++;
                System.err.println("FAIL " + type + " " + name + ": sent " + body + "\n  answered " + resp.body());
            } else {
                System.out.printf("%-32s %-24s %s %s%n", type, name, mtype, code);
            }
        }
        if (bad > 0) {
            System.err.println("java client: " + bad + " of " + reqs.size() + " lines refused or not sent");
            System.exit(1);
        }
        System.out.println("java (quicktype, Debian's JDK and Jackson " + com.fasterxml.jackson.databind.cfg.PackageVersion.VERSION + "): "
                + reqs.size() + " lines of " + types.size() + " message types sent, none refused as malformed");
    }
}

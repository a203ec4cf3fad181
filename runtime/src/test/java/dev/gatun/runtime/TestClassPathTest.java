package dev.gatun.runtime;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * No module ships a junit-platform.properties: ir's test-jar used to bring its copy next to this module's (and the
 * GPU bundle puts every module's test classes on one class path), so JUnit printed a duplicate warning for every
 * test class. The settings live in surefire's configuration in the parent pom. The check reads the source tree, not
 * the class path, so copies an older build left in target/ do not matter.
 */
class TestClassPathTest {

    @Test
    void noModuleShipsAJUnitPlatformProperties() throws IOException {
        Path root = Path.of("..").toAbsolutePath().normalize();
        assertThat(root.resolve("pom.xml")).exists();
        try (Stream<Path> modules = Files.list(root)) {
            List<Path> found = modules.map(m -> m.resolve("src/test/resources/junit-platform.properties")).filter(Files::exists).toList();
            assertThat(found).as("junit-platform.properties files in the modules' test resources").isEmpty();
        }
    }
}

package dev.gatun.runtime;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.URL;
import java.util.Collections;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * At most one junit-platform.properties on the test class path: ir's test-jar used to bring its copy next to this
 * module's, and JUnit printed a duplicate warning for every test class. The settings are in surefire's
 * configuration in the parent pom now (a stale copy left in target/ by an older build is harmless: one file).
 */
class TestClassPathTest {

    @Test
    void atMostOneJUnitPlatformPropertiesOnTheTestClassPath() throws IOException {
        List<URL> found = Collections.list(getClass().getClassLoader().getResources("junit-platform.properties"));
        assertThat(found).as("junit-platform.properties files on the test class path").hasSizeLessThanOrEqualTo(1);
    }
}
